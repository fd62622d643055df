#include "plan/expert_parallel_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "plan/expert_plan.h"

namespace sluice::plan {
namespace {

// Header and ids of one message (dist/expert_parallel.cpp's layout).
constexpr double kMessageHeaderBytes = 16;

}  // namespace

double ExpertParallelPlan::used_experts(int64_t r, double n_tokens) const {
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double pick = static_cast<double>(in.n_expert_used) / static_cast<double>(in.n_expert);
  return static_cast<double>(g.end - g.begin) * (1.0 - std::pow(1.0 - pick, n_tokens));
}

double ExpertParallelPlan::hit_rate(int64_t r, double n_tokens) const {
  if (!streams(r)) return 1.0;
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const int64_t z = slots[static_cast<size_t>(r)];
  // Rank 0 routes and predicts the next layer's experts; the others read
  // what they are sent.
  if (r == 0) return expected_hit_rate(z, in.n_routed_layers, g.end - g.begin, used_experts(r, n_tokens));
  return std::min(1.0, static_cast<double>(z) / static_cast<double>(in.n_routed_layers * (g.end - g.begin)));
}

double ExpertParallelPlan::disk_s(int64_t r, double n_tokens) const {
  if (!streams(r)) return 0.0;
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  const double missed = (1.0 - hit_rate(r, n_tokens)) * used_experts(r, n_tokens);
  return missed * static_cast<double>(in.expert_bytes) / (k.disk_gbps * 1e9);
}

double ExpertParallelPlan::experts_s(int64_t r, double n_tokens) const {
  const RankResources& k = in.ranks[static_cast<size_t>(r)];
  const ExpertRange g = shares[static_cast<size_t>(r)];
  const double share = static_cast<double>(g.end - g.begin) / static_cast<double>(in.n_expert);
  const double rows = n_tokens * static_cast<double>(in.n_expert_used) * share;
  const double read = used_experts(r, n_tokens) * static_cast<double>(in.expert_bytes) / (k.read_gbps * 1e9);
  const double compute = rows * in.expert_flops / (k.tflops * 1e12);
  return std::max(read, compute) + disk_s(r, n_tokens);
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

double ExpertParallelPlan::layer_s(double n_tokens, bool with_disk) const {
  auto rank_s = [&](int64_t r) { return experts_s(r, n_tokens) - (with_disk ? 0.0 : disk_s(r, n_tokens)); };
  double layer = rank_s(0);
  for (int64_t r = 1; r < n_ranks(); ++r) layer = std::max(layer, rank_s(r) + link_s(r, n_tokens));
  return layer;
}

double ExpertParallelPlan::step_s(double n_tokens) const {
  const RankResources& k0 = in.ranks[0];
  const double dense = std::max(static_cast<double>(in.dense_read_bytes) / (k0.read_gbps * 1e9),
                                n_tokens * in.dense_flops_per_token / (k0.tflops * 1e12));
  return dense + static_cast<double>(in.n_routed_layers) * layer_s(n_tokens, /*with_disk=*/true);
}

double ExpertParallelPlan::network_s(double n_tokens) const {
  const double local = experts_s(0, n_tokens);
  return static_cast<double>(in.n_routed_layers) * (layer_s(n_tokens, /*with_disk=*/true) - local);
}

double ExpertParallelPlan::disk_wait_s(double n_tokens) const {
  return static_cast<double>(in.n_routed_layers) *
         (layer_s(n_tokens, /*with_disk=*/true) - layer_s(n_tokens, /*with_disk=*/false));
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
  const uint64_t dense_resident = in.dense_resident_bytes > 0 ? in.dense_resident_bytes : in.dense_bytes;
  std::string refusal;
  for (int64_t r = 0; r < S; ++r) {
    const ExpertRange g{r * in.n_expert / S, (r + 1) * in.n_expert / S};
    p.shares.push_back(g);
    const int64_t n_share = g.end - g.begin;
    const uint64_t experts = static_cast<uint64_t>(n_share) * static_cast<uint64_t>(in.n_routed_layers) *
                             in.expert_bytes;
    const uint64_t bytes = experts + (r == 0 ? in.dense_bytes : 0);
    p.share_bytes.push_back(bytes);
    p.rank_bytes.push_back(bytes);
    p.slots.push_back(0);
    const RankResources& k = in.ranks[static_cast<size_t>(r)];
    if (bytes <= k.mem_cap_bytes) continue;
    // Streaming the share: the resident part, then a pool of at least one
    // routed layer's share of slots.
    const bool can_stream = k.budget_given && k.disk_gbps > 0 && in.expert_slot_bytes > 0;
    const uint64_t resident = r == 0 ? dense_resident : 0;
    const uint64_t least = resident + static_cast<uint64_t>(n_share) * in.expert_slot_bytes;
    if (can_stream && least <= k.mem_cap_bytes) {
      const auto fit = static_cast<int64_t>((k.mem_cap_bytes - resident) / in.expert_slot_bytes);
      p.slots.back() = std::min(fit, n_share * in.n_routed_layers);
      p.rank_bytes.back() = resident + static_cast<uint64_t>(p.slots.back()) * in.expert_slot_bytes;
      continue;
    }
    std::string why;
    if (in.expert_slot_bytes == 0) why = "; this model's experts cannot stream expert by expert";
    else if (!k.budget_given) why = "; only a rank given --mem-budget streams its share from its disk";
    else if (!(k.disk_gbps > 0)) why = "; its disk was not measured, so it cannot stream its share";
    else
      why = fmt::format("; streaming the share from its disk needs at least {:.2f} MiB (resident {:.2f} MiB + a "
                        "pool of {} expert slots x {:.3f} MiB)",
                        mib(least), mib(resident), n_share, mib(in.expert_slot_bytes));
    refusal += fmt::format("{}rank {} needs {:.1f} MiB for experts {}-{}{} and may hold {:.1f} MiB ({}){}",
                           refusal.empty() ? "" : "; ", r, mib(bytes), g.begin, g.end - 1,
                           r == 0 ? " and the rest of the model" : "", mib(k.mem_cap_bytes),
                           k.budget_given ? "its --mem-budget" : "memory available", why);
  }
  if (!refusal.empty())
    return invalid_argument("the model's experts cannot be split over {} ranks that fit: {}", S, refusal);
  return p;
}

}  // namespace sluice::plan
