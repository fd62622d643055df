#include "plan/pipeline_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "plan/expert_plan.h"
#include "plan/stream_plan.h"

namespace sluice::plan {

double PipelinePlan::in_memory_s(int64_t r, double n_tokens, bool together, double n_logits,
                                 double keys_before) const {
  const auto i = static_cast<size_t>(r);
  auto rate = [&](double n) {
    const double alone = stage_tflops_curve[i].at_or(n, stage_tflops[i]);
    return (together ? stage_tflops_curve_shared[i].at_or(n, alone) : alone) * 1e12;
  };
  const double head = r == 0 ? head_flops : 0.0;
  if (n_logits < 0) n_logits = n_tokens;
  // The layers' compute, streamed ones at their own rate; the head's rows;
  // attention over the keys before the micro-batch.
  const double layers = (stage_flops[i] - head) * n_tokens, resident_rate = rate(n_tokens);
  double compute = layers / resident_rate;
  if (stage_streamed[i] > 0 && !stage_streamed_curve[i].empty()) {
    const LayerRange g = ranges[i];
    const double f = static_cast<double>(stage_streamed[i]) / static_cast<double>(g.end - g.begin);
    compute = layers * ((1 - f) / resident_rate + f / (stage_streamed_curve[i].at(n_tokens) * 1e12));
  }
  if (head > 0 && n_logits > 0) compute += head * n_logits / rate(n_logits);
  compute += stage_attention_s[i] * n_tokens * keys_before;
  return std::max(stage_read_s[i], compute);
}

double PipelinePlan::stage_s(int64_t r, double n_tokens, bool together, double n_logits, double keys_before) const {
  const double in_memory = in_memory_s(r, n_tokens, together, n_logits, keys_before);
  const double disk =
      disk_s(r, n_tokens) * (together ? static_cast<double>(stage_disk_sharers[static_cast<size_t>(r)]) : 1.0);
  // Missed experts are read once their layer routes: on top of the compute.
  if (streams_experts(r)) return in_memory + disk;
  return std::max(in_memory, disk);
}

namespace {

// The experts of E a step of n tokens chooses in a routed layer, each token
// choosing a given one with probability `pick`.
double chosen_experts(int64_t n_expert, double pick, double n_tokens) {
  return static_cast<double>(n_expert) * (1.0 - std::pow(1.0 - pick, n_tokens));
}

}  // namespace

double PipelinePlan::expert_hit_rate(int64_t r, double n_tokens) const {
  if (!streams_experts(r)) return 1.0;
  const auto i = static_cast<size_t>(r);
  return expected_hit_rate(stage_expert_slots[i], stage_routed_layers[i], n_expert,
                           chosen_experts(n_expert, expert_pick, n_tokens));
}

double PipelinePlan::disk_s(int64_t r, double n_tokens) const {
  const auto i = static_cast<size_t>(r);
  if (!streams_experts(r)) return stage_disk_s[i];
  const double d = chosen_experts(n_expert, expert_pick, n_tokens);
  const double missed = static_cast<double>(stage_routed_layers[i]) * (1.0 - expert_hit_rate(r, n_tokens)) * d;
  return missed * static_cast<double>(expert_bytes) / (disk_gbps[i] * 1e9);
}

bool PipelinePlan::layer_streamed(int64_t r, int64_t l) const {
  const LayerRange g = ranges[static_cast<size_t>(r)];
  return streams(r) && l >= g.begin && l < g.end &&
         streamed_in_spread(l - g.begin, g.end - g.begin, stage_streamed[static_cast<size_t>(r)]);
}

double PipelinePlan::hop_s(int64_t r, double n_tokens) const {
  const LinkFigures& l = links[static_cast<size_t>(r == 0 ? n_stages() - 1 : r)];
  return l.latency_s + n_tokens * static_cast<double>(n_embd) * 4.0 / (l.gbps * 1e9);
}

double PipelinePlan::step_s(int64_t n_tokens, int64_t n_logits, int64_t m, bool one_prompt) const {
  const double n = static_cast<double>(n_tokens) / static_cast<double>(m);
  const double logits = static_cast<double>(n_logits) / static_cast<double>(m);
  // Micro-batch i of one prompt attends over the i x n keys before it too.
  auto t = [&](int64_t r, int64_t i) {
    return stage_s(r, n, /*together=*/m > 1, logits, one_prompt ? static_cast<double>(i) * n : 0.0);
  };
  double sum = 0;
  for (int64_t r = 0; r < n_stages(); ++r) sum += t(r, 0) + (r > 0 ? hop_s(r, n) : 0.0);
  if (n_stages() > 1) sum += hop_s(0, logits);
  for (int64_t i = 1; i < m; ++i) {
    double slowest = 0;
    for (int64_t r = 0; r < n_stages(); ++r) slowest = std::max({slowest, t(r, i), r > 0 ? hop_s(r, n) : 0.0});
    sum += slowest;
  }
  return sum;
}

int64_t PipelinePlan::best_micro_batches(int64_t n_tokens, int64_t n_logits, int64_t max_m, bool one_prompt) const {
  int64_t best = 1;
  for (int64_t m = 2; m <= max_m; ++m)
    if (step_s(n_tokens, n_logits, m, one_prompt) < step_s(n_tokens, n_logits, best, one_prompt)) best = m;
  return best;
}

uint64_t PipelinePlan::hop_bytes(int64_t r, int64_t n_tokens, int64_t n_logits) const {
  return static_cast<uint64_t>(r == 0 ? n_logits : n_tokens) * static_cast<uint64_t>(n_embd) * 4;
}

namespace {

// Rank r holding layers [b, e): in memory, or streaming the rest from its
// disk (the header's model); ok false when neither fits.
struct PipelineStageFit {
  bool ok = false;
  uint64_t held_bytes = 0;   // in memory
  uint64_t range_bytes = 0;  // the range's weights
  double read_s = 0, flops = 0, disk_s = 0;  // disk_s: one decode token's
  int64_t n_streamed = 0, n_ring = 0;
  int64_t n_expert_slots = 0, n_routed = 0;  // a routed range streaming its experts
};

class PipelineStageModel {
 public:
  explicit PipelineStageModel(const PipelineInputs& in) : in_(in) {
    const size_t L = in.layer_bytes.size();
    pre_bytes_.assign(L + 1, 0);
    pre_read_.assign(L + 1, 0);
    pre_flops_.assign(L + 1, 0);
    const bool read_given = in.layer_read_bytes.size() == L;
    for (size_t l = 0; l < L; ++l) {
      pre_bytes_[l + 1] = pre_bytes_[l] + in.layer_bytes[l];
      pre_read_[l + 1] = pre_read_[l] + (read_given ? in.layer_read_bytes[l] : in.layer_bytes[l]);
      pre_flops_[l + 1] = pre_flops_[l] + in.layer_flops_per_token[l];
    }
  }

  uint64_t model_bytes() const { return pre_bytes_.back() + in_.head_bytes; }
  bool can_stream(int64_t r) const {
    const RankResources& k = in_.ranks[static_cast<size_t>(r)];
    return k.budget_given && k.disk_gbps > 0 &&
           ((in_.layer_slot_bytes.size() == in_.layer_bytes.size() &&
             in_.layer_pinned_bytes.size() == in_.layer_bytes.size()) ||
            streams_experts());
  }
  bool streams_experts() const {
    return in_.expert_slot_bytes > 0 && in_.n_expert > 0 && in_.layer_dense_bytes.size() == in_.layer_bytes.size() &&
           in_.layer_routed.size() == in_.layer_bytes.size();
  }
  // Rank r's resident bytes holding `per_layer` of each layer of [b, e)
  // (rank 0 with its head).
  uint64_t resident(int64_t r, int64_t b, int64_t e, const std::vector<uint64_t>& per_layer) const {
    uint64_t n = r == 0 ? in_.head_bytes : 0;
    for (int64_t l = b; l < e; ++l) n += per_layer[static_cast<size_t>(l)];
    return n;
  }
  // A routed range streaming its experts: what stays resident (rank 0's head,
  // every layer's dense part) and its routed layers.
  uint64_t dense_resident(int64_t r, int64_t b, int64_t e) const { return resident(r, b, e, in_.layer_dense_bytes); }
  int64_t routed(int64_t b, int64_t e) const {
    int64_t n = 0;
    for (int64_t l = b; l < e; ++l) n += in_.layer_routed[static_cast<size_t>(l)] ? 1 : 0;
    return n;
  }
  // The least a routed range streaming its experts needs: its resident part
  // and one routed layer's experts in slots.
  uint64_t expert_minimum(int64_t r, int64_t b, int64_t e) const {
    return dense_resident(r, b, e) + static_cast<uint64_t>(in_.n_expert) * in_.expert_slot_bytes;
  }
  // What stays resident of [b, e) when it streams, and its largest slot.
  uint64_t essentials(int64_t r, int64_t b, int64_t e) const { return resident(r, b, e, in_.layer_pinned_bytes); }
  uint64_t slot(int64_t b, int64_t e) const {
    uint64_t s = 0;
    for (int64_t l = b; l < e; ++l) s = std::max(s, in_.layer_slot_bytes[static_cast<size_t>(l)]);
    return s;
  }

  PipelineStageFit fit(int64_t r, int64_t b, int64_t e) const {
    const RankResources& k = in_.ranks[static_cast<size_t>(r)];
    PipelineStageFit f;
    f.range_bytes =
        pre_bytes_[static_cast<size_t>(e)] - pre_bytes_[static_cast<size_t>(b)] + (r == 0 ? in_.head_bytes : 0);
    const uint64_t read = pre_read_[static_cast<size_t>(e)] - pre_read_[static_cast<size_t>(b)] +
                          (r == 0 ? in_.head_read_bytes : 0);
    f.read_s = static_cast<double>(read) / (k.read_gbps * 1e9);
    f.flops = pre_flops_[static_cast<size_t>(e)] - pre_flops_[static_cast<size_t>(b)] +
              (r == 0 ? in_.head_flops_per_token : 0.0);
    if (f.range_bytes <= k.mem_cap_bytes) {
      f.ok = true;
      f.held_bytes = f.range_bytes;
      return f;
    }
    if (!can_stream(r)) return f;
    if (streams_experts()) return fit_experts(r, b, e, f);
    const uint64_t ess = essentials(r, b, e), slot_bytes = slot(b, e);
    if (slot_bytes == 0 || k.mem_cap_bytes < ess + 2 * slot_bytes) return f;
    // The ring as the placement sizes it: plan_stream with the layer's decode
    // time as its compute (a layer of c seconds is c x 1e12 FLOPs at 1 TFLOP/s).
    const int64_t n = e - b;
    const double layer_s = std::max(f.read_s, f.flops / (k.tflops * 1e12)) / static_cast<double>(n);
    const StatusOr<StreamPlan> ring = plan_stream({.n_layer = n,
                                                   .layer_bytes = static_cast<double>(slot_bytes),
                                                   .layer_flops = std::max(layer_s, 1e-12) * 1e12,
                                                   .compute_tflops = 1.0,
                                                   .link_gbps = 0,
                                                   .disk_gbps = k.disk_gbps});
    if (!ring.ok()) return f;
    const uint64_t room = k.mem_cap_bytes - ess;
    f.n_ring = std::min<int64_t>(ring->n_ring_slots, static_cast<int64_t>(room / slot_bytes));
    const uint64_t left = room - static_cast<uint64_t>(f.n_ring) * slot_bytes;
    const int64_t n_resident = std::min<int64_t>(n - 1, static_cast<int64_t>(left / slot_bytes));
    f.n_streamed = n - n_resident;
    f.n_ring = std::min(f.n_ring, f.n_streamed);
    f.held_bytes = ess + static_cast<uint64_t>(f.n_ring) * slot_bytes;
    for (int64_t l = b; l < e; ++l)
      if (!streamed_in_spread(l - b, n, f.n_streamed)) f.held_bytes += in_.layer_slot_bytes[static_cast<size_t>(l)];
    f.disk_s = static_cast<double>(f.n_streamed) * static_cast<double>(slot_bytes) / (k.disk_gbps * 1e9);
    f.ok = true;
    return f;
  }
  // [b, e) of a routed model streaming its experts through a pool of slots.
  PipelineStageFit fit_experts(int64_t r, int64_t b, int64_t e, PipelineStageFit f) const {
    const RankResources& k = in_.ranks[static_cast<size_t>(r)];
    f.n_routed = routed(b, e);
    const uint64_t resident = dense_resident(r, b, e);
    if (f.n_routed == 0 || k.mem_cap_bytes < expert_minimum(r, b, e)) return f;
    const int64_t all = f.n_routed * in_.n_expert;
    f.n_expert_slots =
        std::min<int64_t>(all, static_cast<int64_t>((k.mem_cap_bytes - resident) / in_.expert_slot_bytes));
    f.held_bytes = resident + static_cast<uint64_t>(f.n_expert_slots) * in_.expert_slot_bytes;
    const double d = chosen_experts(in_.n_expert, in_.expert_pick, 1);
    const double h = expected_hit_rate(f.n_expert_slots, f.n_routed, in_.n_expert, d);
    f.disk_s =
        static_cast<double>(f.n_routed) * (1.0 - h) * d * static_cast<double>(in_.expert_bytes) / (k.disk_gbps * 1e9);
    f.ok = true;
    return f;
  }
  // One token's stage time (decode).
  double decode_s(int64_t r, const PipelineStageFit& f) const {
    const double in_memory = std::max(f.read_s, f.flops / (in_.ranks[static_cast<size_t>(r)].tflops * 1e12));
    return f.n_expert_slots > 0 ? in_memory + f.disk_s : std::max(in_memory, f.disk_s);
  }

  // Why no cut fits: each rank's least need (its smallest range, in memory
  // or streaming where it may) against its cap.
  std::string shortfall() const {
    const auto S = static_cast<int64_t>(in_.ranks.size());
    const auto L = static_cast<int64_t>(in_.layer_bytes.size());
    std::string s;
    for (int64_t r = 0; r < S; ++r) {
      const RankResources& k = in_.ranks[static_cast<size_t>(r)];
      // The smallest ranges rank r may get: all layers alone; one layer
      // otherwise (rank 0's the first, the last rank's the last).
      std::vector<LayerRange> smallest;
      if (S == 1) smallest.push_back({0, L});
      else if (r == 0) smallest.push_back({0, 1});
      else if (r == S - 1) smallest.push_back({L - 1, L});
      else
        for (int64_t l = r; l <= L - S + r; ++l) smallest.push_back({l, l + 1});
      uint64_t whole = std::numeric_limits<uint64_t>::max(), stream = whole, stream_ess = 0, stream_slot = 0;
      LayerRange whole_range;
      for (const LayerRange g : smallest) {
        const uint64_t held = pre_bytes_[static_cast<size_t>(g.end)] - pre_bytes_[static_cast<size_t>(g.begin)] +
                              (r == 0 ? in_.head_bytes : 0);
        if (held < whole) {
          whole = held;
          whole_range = g;
        }
        if (!can_stream(r)) continue;
        if (streams_experts()) {
          if (routed(g.begin, g.end) == 0) continue;
          if (expert_minimum(r, g.begin, g.end) < stream) {
            stream = expert_minimum(r, g.begin, g.end);
            stream_ess = dense_resident(r, g.begin, g.end);
            stream_slot = in_.expert_slot_bytes;
          }
          continue;
        }
        const uint64_t ess = essentials(r, g.begin, g.end), sl = slot(g.begin, g.end);
        if (ess + 2 * sl < stream) {
          stream = ess + 2 * sl;
          stream_ess = ess;
          stream_slot = sl;
        }
      }
      if (std::min(whole, stream) <= k.mem_cap_bytes) continue;
      s += fmt::format("; rank {} ({}): {} {:.2f} MiB < {:.2f} MiB to hold its smallest range (layers {}-{}{}) in "
                       "memory",
                       r, k.host, k.budget_given ? "--mem-budget" : "available memory", mib(k.mem_cap_bytes),
                       mib(whole), whole_range.begin, whole_range.end - 1, r == 0 ? " +head" : "");
      if (can_stream(r) && streams_experts())
        s += fmt::format(" and {:.2f} MiB, the least a rank streaming its experts from its disk needs (resident "
                         "{:.2f} MiB + a routed layer's {} experts in slots of {:.2f} MiB)",
                         mib(stream), mib(stream_ess), in_.n_expert, mib(stream_slot));
      else if (can_stream(r))
        s += fmt::format(" and {:.2f} MiB, the least a rank streaming from its disk needs (resident {:.2f} MiB + a "
                         "ring of 2 slots x {:.2f} MiB)",
                         mib(stream), mib(stream_ess), mib(stream_slot));
      else if (!k.budget_given)
        s += " (only a rank with its own --mem-budget streams from its disk)";
      else if (in_.layer_slot_bytes.empty() && !streams_experts())
        s += " (this model's layers do not stream per rank)";
      else
        s += " (its disk was not measured)";
    }
    return s;
  }

 private:
  const PipelineInputs& in_;
  std::vector<uint64_t> pre_bytes_, pre_read_;
  std::vector<double> pre_flops_;
};

}  // namespace

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
  const PipelineStageModel model(in);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[r][e]: (slowest, sum) of one token's stage times over ranks 0..r
  // holding layers [0, e): the cut minimizes the slowest stage, then the sum.
  struct Cell {
    double slowest = kInf, sum = kInf;
    int64_t from = -1;
  };
  std::vector<std::vector<Cell>> best(static_cast<size_t>(S), std::vector<Cell>(static_cast<size_t>(L + 1)));
  for (int64_t r = 0; r < S; ++r) {
    for (int64_t e = r + 1; e <= L - (S - 1 - r); ++e) {
      for (int64_t b = (r == 0 ? 0 : r); b < e; ++b) {
        if (r == 0 && b != 0) break;
        const Cell prev = r == 0 ? Cell{0, 0, -1} : best[static_cast<size_t>(r - 1)][static_cast<size_t>(b)];
        if (prev.slowest == kInf) continue;
        const PipelineStageFit f = model.fit(r, b, e);
        if (!f.ok) continue;
        const double c = model.decode_s(r, f);
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
      caps += fmt::format("{}rank {}: {:.2f} MiB", r ? ", " : "", r, mib(in.ranks[static_cast<size_t>(r)].mem_cap_bytes));
    }
    return resource_exhausted(
        "the model's {:.2f} MiB of weights cannot be cut into {} ranges that fit the ranks' memory, in memory or "
        "streaming from each rank's disk ({}; {:.2f} MiB together){}: raise --mem-budget, or run more ranks",
        mib(model.model_bytes()), S, caps, mib(cap), model.shortfall());
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
  p.n_expert = in.n_expert;
  p.expert_pick = in.expert_pick;
  p.expert_bytes = in.expert_bytes;
  p.head_flops = in.head_flops_per_token;
  for (int64_t r = 0; r < S; ++r) {
    const LayerRange g = p.ranges[static_cast<size_t>(r)];
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    const PipelineStageFit f = model.fit(r, g.begin, g.end);
    p.stage_bytes.push_back(f.held_bytes);
    p.range_bytes.push_back(f.range_bytes);
    p.stage_read_s.push_back(f.read_s);
    p.stage_flops.push_back(f.flops);
    p.stage_tflops.push_back(k.tflops);
    p.stage_tflops_curve.push_back(k.forward_curve.empty() ? k.tflops_curve : k.forward_curve);
    p.stage_tflops_curve_shared.push_back(k.forward_curve_shared);
    p.stage_streamed_curve.push_back(k.forward_curve_streamed);
    p.stage_attention_s.push_back(k.attention_pair_s * static_cast<double>(g.end - g.begin));
    p.stage_streamed.push_back(f.n_streamed);
    p.stage_ring_slots.push_back(f.n_ring);
    p.stage_disk_s.push_back(f.disk_s);
    p.disk_gbps.push_back(k.disk_gbps);
    p.stage_expert_slots.push_back(f.n_expert_slots);
    p.stage_routed_layers.push_back(f.n_routed);
  }
  // Streaming ranks of one host read one disk: at once, each at its share.
  for (int64_t r = 0; r < S; ++r) {
    int64_t n = 0;
    for (int64_t q = 0; q < S && p.streams(r); ++q)
      n += p.streams(q) && in.ranks[static_cast<size_t>(q)].host == in.ranks[static_cast<size_t>(r)].host ? 1 : 0;
    p.stage_disk_sharers.push_back(std::max<int64_t>(n, 1));
  }
  return p;
}

}  // namespace sluice::plan
