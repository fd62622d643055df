#include "plan/expert_parallel_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace sluice::plan {
namespace {

// Header and ids of one message (dist/expert_parallel.cpp's layout).
constexpr double kMessageHeaderBytes = 16;

}  // namespace

double ExpertParallelPlan::experts_s(int64_t r, double n_tokens) const {
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double e_r = static_cast<double>(g.end - g.begin);
  const double share = e_r / static_cast<double>(in.n_expert);
  const double pick = static_cast<double>(in.n_expert_used) / static_cast<double>(in.n_expert);
  const double used = e_r * (1.0 - std::pow(1.0 - pick, n_tokens));
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * share;
  const double read = used * static_cast<double>(in.expert_bytes) / (k.read_gbps * 1e9);
  const double compute = rows * in.expert_flops / (k.tflops * 1e12);
  return std::max(read, compute);
}

double ExpertParallelPlan::bytes_out(int64_t r, double n_tokens) const {
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * static_cast<double>(g.end - g.begin) /
                      static_cast<double>(in.n_expert);
  return kMessageHeaderBytes + rows * (static_cast<double>(in.n_embd) * 4 + 4);
}

double ExpertParallelPlan::bytes_back(int64_t r, double n_tokens) const {
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * static_cast<double>(g.end - g.begin) /
                      static_cast<double>(in.n_expert);
  return rows * static_cast<double>(in.n_embd) * 4;
}

double ExpertParallelPlan::link_s(int64_t r, double n_tokens) const {
  const LinkFigures& l = in.links[static_cast<size_t>(r)];
  return 2 * l.latency_s + (bytes_out(r, n_tokens) + bytes_back(r, n_tokens)) / (l.gbps * 1e9);
}

double ExpertParallelPlan::step_s(double n_tokens) const {
  const RankResources& k0 = in.ranks[0];
  const double dense = std::max(static_cast<double>(in.dense_read_bytes) / (k0.read_gbps * 1e9),
                                n_tokens * in.dense_flops_per_token / (k0.tflops * 1e12));
  double layer = experts_s(0, n_tokens);
  for (int64_t r = 1; r < n_ranks(); ++r) layer = std::max(layer, experts_s(r, n_tokens) + link_s(r, n_tokens));
  return dense + static_cast<double>(in.n_routed_layers) * layer;
}

double ExpertParallelPlan::network_s(double n_tokens) const {
  const double local = experts_s(0, n_tokens);
  double layer = local;
  for (int64_t r = 1; r < n_ranks(); ++r) layer = std::max(layer, experts_s(r, n_tokens) + link_s(r, n_tokens));
  return static_cast<double>(in.n_routed_layers) * (layer - local);
}

StatusOr<ExpertParallelPlan> plan_expert_parallel(const ExpertParallelInputs& in) {
  const auto S = static_cast<int64_t>(in.ranks.size());
  if (S == 0) return invalid_argument("an expert-parallel plan needs at least one rank");
  if (in.n_expert <= 0 || in.n_routed_layers <= 0)
    return invalid_argument("--parallel ep needs a mixture-of-experts model; this one has no routed experts "
                            "(use --parallel pp)");
  if (S > in.n_expert)
    return invalid_argument("{} ranks for {} experts: expert parallelism needs at least one expert per rank", S,
                            in.n_expert);
  if (static_cast<int64_t>(in.links.size()) != S) return invalid_argument("links for {} ranks, not {}", in.links.size(), S);
  for (int64_t r = 0; r < S; ++r) {
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    if (!(k.read_gbps > 0) || !(k.tflops > 0)) return invalid_argument("rank {} has no measured rates", r);
    if (r > 0 && !(in.links[static_cast<size_t>(r)].gbps > 0))
      return invalid_argument("the link to rank {} has no measured bandwidth", r);
  }
  ExpertParallelPlan p;
  p.in = in;
  std::string refusal;
  for (int64_t r = 0; r < S; ++r) {
    const ExpertRange g{r * in.n_expert / S, (r + 1) * in.n_expert / S};
    p.shares.push_back(g);
    const uint64_t experts = static_cast<uint64_t>(g.end - g.begin) * static_cast<uint64_t>(in.n_routed_layers) *
                             in.expert_bytes;
    const uint64_t bytes = experts + (r == 0 ? in.dense_bytes : 0);
    p.rank_bytes.push_back(bytes);
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    if (bytes > k.mem_cap_bytes)
      refusal += fmt::format("{}rank {} needs {:.1f} MiB for experts {}-{}{} and may hold {:.1f} MiB ({})",
                             refusal.empty() ? "" : "; ", r, mib(bytes), g.begin, g.end - 1,
                             r == 0 ? " and the rest of the model" : "", mib(k.mem_cap_bytes),
                             k.budget_given ? "its --mem-budget" : "memory available");
  }
  if (!refusal.empty())
    return invalid_argument("the model's experts cannot be split over {} ranks that fit: {}", S, refusal);
  return p;
}

}  // namespace sluice::plan
