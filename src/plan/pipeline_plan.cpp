#include "plan/pipeline_plan.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace sluice::plan {

double PipelinePlan::stage_s(int64_t r, double n_tokens) const {
  const auto i = static_cast<size_t>(r);
  return std::max(stage_read_s[i], stage_flops[i] * n_tokens / (stage_tflops[i] * 1e12));
}

double PipelinePlan::hop_s(int64_t r, double n_tokens) const {
  const LinkFigures& l = links[static_cast<size_t>(r == 0 ? n_stages() - 1 : r)];
  return l.latency_s + n_tokens * static_cast<double>(n_embd) * 4.0 / (l.gbps * 1e9);
}

double PipelinePlan::step_s(int64_t n_tokens, int64_t n_logits, int64_t m) const {
  const double n = static_cast<double>(n_tokens) / static_cast<double>(m);
  double sum = 0, slowest = 0;
  for (int64_t r = 0; r < n_stages(); ++r) {
    const double t = stage_s(r, n), h = r > 0 ? hop_s(r, n) : 0.0;
    sum += t + h;
    slowest = std::max({slowest, t, h});
  }
  if (n_stages() > 1) sum += hop_s(0, static_cast<double>(n_logits) / static_cast<double>(m));
  return sum + static_cast<double>(m - 1) * slowest;
}

int64_t PipelinePlan::best_micro_batches(int64_t n_tokens, int64_t n_logits, int64_t max_m) const {
  int64_t best = 1;
  for (int64_t m = 2; m <= max_m; ++m)
    if (step_s(n_tokens, n_logits, m) < step_s(n_tokens, n_logits, best)) best = m;
  return best;
}

uint64_t PipelinePlan::hop_bytes(int64_t r, int64_t n_tokens, int64_t n_logits) const {
  return static_cast<uint64_t>(r == 0 ? n_logits : n_tokens) * static_cast<uint64_t>(n_embd) * 4;
}

StatusOr<PipelinePlan> plan_pipeline(const PipelineInputs& in) {
  const auto S = static_cast<int64_t>(in.ranks.size());
  const auto L = static_cast<int64_t>(in.layer_bytes.size());
  if (S < 1) return invalid_argument("a pipeline needs at least one rank");
  if (S > L) return invalid_argument("{} ranks for {} layers: each rank needs a layer; use at most {} ranks", S, L, L);
  if (in.layer_flops_per_token.size() != in.layer_bytes.size() || in.links.size() != in.ranks.size())
    return invalid_argument("pipeline inputs disagree in size");
  for (int64_t r = 0; r < S; ++r) {
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    if (!(k.read_gbps > 0) || !(k.tflops > 0)) return invalid_argument("rank {} measured no read or matmul rate", r);
    if (r > 0 && !(in.links[static_cast<size_t>(r)].gbps > 0))
      return invalid_argument("the link to rank {} measured no bandwidth", r);
  }
  std::vector<uint64_t> pre_bytes(static_cast<size_t>(L + 1), 0);
  std::vector<double> pre_flops(static_cast<size_t>(L + 1), 0);
  for (int64_t l = 0; l < L; ++l) {
    pre_bytes[static_cast<size_t>(l + 1)] = pre_bytes[static_cast<size_t>(l)] + in.layer_bytes[static_cast<size_t>(l)];
    pre_flops[static_cast<size_t>(l + 1)] =
        pre_flops[static_cast<size_t>(l)] + in.layer_flops_per_token[static_cast<size_t>(l)];
  }
  auto bytes_of = [&](int64_t r, int64_t b, int64_t e) {
    return pre_bytes[static_cast<size_t>(e)] - pre_bytes[static_cast<size_t>(b)] + (r == 0 ? in.head_bytes : 0);
  };
  auto read_bytes = [&](int64_t r, int64_t b, int64_t e) {
    return pre_bytes[static_cast<size_t>(e)] - pre_bytes[static_cast<size_t>(b)] + (r == 0 ? in.head_read_bytes : 0);
  };
  // One token's stage time (decode): the cut minimizes the slowest stage, then the sum.
  auto cost = [&](int64_t r, int64_t b, int64_t e) {
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    const double flops = pre_flops[static_cast<size_t>(e)] - pre_flops[static_cast<size_t>(b)] +
                         (r == 0 ? in.head_flops_per_token : 0.0);
    return std::max(static_cast<double>(read_bytes(r, b, e)) / (k.read_gbps * 1e9), flops / (k.tflops * 1e12));
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[r][e]: (slowest, sum) over ranks 0..r holding layers [0, e).
  struct Cell {
    double slowest = kInf, sum = kInf;
    int64_t from = -1;
  };
  std::vector<std::vector<Cell>> best(static_cast<size_t>(S), std::vector<Cell>(static_cast<size_t>(L + 1)));
  for (int64_t r = 0; r < S; ++r) {
    for (int64_t e = r + 1; e <= L - (S - 1 - r); ++e) {
      for (int64_t b = (r == 0 ? 0 : r); b < e; ++b) {
        if (r == 0 && b != 0) break;
        if (bytes_of(r, b, e) > in.ranks[static_cast<size_t>(r)].mem_cap_bytes) continue;
        const Cell prev = r == 0 ? Cell{0, 0, -1} : best[static_cast<size_t>(r - 1)][static_cast<size_t>(b)];
        if (prev.slowest == kInf) continue;
        const double c = cost(r, b, e);
        const Cell cand{std::max(prev.slowest, c), prev.sum + c, b};
        Cell& cur = best[static_cast<size_t>(r)][static_cast<size_t>(e)];
        if (cand.slowest < cur.slowest || (cand.slowest == cur.slowest && cand.sum < cur.sum)) cur = cand;
      }
    }
  }
  if (best[static_cast<size_t>(S - 1)][static_cast<size_t>(L)].slowest == kInf) {
    uint64_t cap = 0;
    std::string caps;
    for (int64_t r = 0; r < S; ++r) {
      cap += in.ranks[static_cast<size_t>(r)].mem_cap_bytes;
      caps += fmt::format("{}rank {}: {:.1f} MiB", r ? ", " : "", r, mib(in.ranks[static_cast<size_t>(r)].mem_cap_bytes));
    }
    return resource_exhausted(
        "the model's {:.1f} MiB of weights cannot be cut into {} ranges that fit the ranks' memory ({}; {:.1f} MiB "
        "together): raise --mem-budget, or run more ranks",
        mib(pre_bytes[static_cast<size_t>(L)] + in.head_bytes), S, caps, mib(cap));
  }
  PipelinePlan p;
  p.ranges.resize(static_cast<size_t>(S));
  for (int64_t r = S - 1, e = L; r >= 0; --r) {
    const int64_t b = best[static_cast<size_t>(r)][static_cast<size_t>(e)].from;
    p.ranges[static_cast<size_t>(r)] = {r == 0 ? 0 : b, e};
    e = r == 0 ? 0 : b;
  }
  p.links = in.links;
  p.n_embd = in.n_embd;
  for (int64_t r = 0; r < S; ++r) {
    const LayerRange g = p.ranges[static_cast<size_t>(r)];
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    p.stage_bytes.push_back(bytes_of(r, g.begin, g.end));
    p.stage_read_s.push_back(static_cast<double>(read_bytes(r, g.begin, g.end)) / (k.read_gbps * 1e9));
    p.stage_flops.push_back(pre_flops[static_cast<size_t>(g.end)] - pre_flops[static_cast<size_t>(g.begin)] +
                            (r == 0 ? in.head_flops_per_token : 0.0));
    p.stage_tflops.push_back(k.tflops);
  }
  return p;
}

}  // namespace sluice::plan
