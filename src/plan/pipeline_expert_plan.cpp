#include "plan/pipeline_expert_plan.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace sluice::plan {
namespace {

double stage_hops_s(const PipelinePlan& p, double n_tokens) {
  double s = 0;
  for (int64_t r = 0; r < p.n_stages() && p.n_stages() > 1; ++r) s += p.hop_s(r, n_tokens);
  return s;
}

}  // namespace

double PipelineExpertPlan::step_s(double n_tokens) const {
  double s = stage_hops_s(pipeline, n_tokens);
  for (const ExpertParallelPlan& e : stages) s += e.step_s(n_tokens);
  return s;
}

double PipelineExpertPlan::network_s(double n_tokens) const {
  double s = stage_hops_s(pipeline, n_tokens);
  for (const ExpertParallelPlan& e : stages) s += e.network_s(n_tokens);
  return s;
}

Status check_stage_groups(int64_t n_ranks, int64_t ep_size) {
  if (ep_size < 1) return invalid_argument("--ep-size must be at least 1, got {}", ep_size);
  if (n_ranks < 1 || n_ranks % ep_size != 0)
    return invalid_argument("{} ranks cannot be pipeline stages of --ep-size {} ranks each: the job's ranks must be "
                            "a multiple of it (stages x {})",
                            n_ranks, ep_size, ep_size);
  return Status();
}

StatusOr<PipelineExpertPlan> plan_pipeline_experts(const PipelineExpertInputs& in) {
  const auto N = static_cast<int64_t>(in.ranks.size());
  const int64_t E = in.ep_size;
  const auto L = static_cast<int64_t>(in.layers.layer_bytes.size());
  const ExpertParallelInputs& x = in.experts;
  RETURN_IF_ERROR(check_stage_groups(N, E));
  const int64_t P = N / E;
  if (P > L)
    return invalid_argument("{} stages ({} ranks / --ep-size {}) for {} layers: each stage needs a layer; use at most "
                            "{} stages",
                            P, N, E, L, L);
  RETURN_IF_ERROR(check_expert_split(x, E, "--parallel pp,ep", fmt::format("--ep-size {}", E)));
  if (static_cast<int64_t>(in.routed.size()) != L || static_cast<int64_t>(in.links.size()) != N)
    return invalid_argument("pipeline and expert inputs disagree in size");

  // Step 1: the cut over the leads, each layer as its lead holds it.
  const int64_t lead_share = x.n_expert / E;  // plan_expert_parallel's first share
  const auto all_experts = static_cast<uint64_t>(x.n_expert) * x.expert_bytes;
  const double all_flops = static_cast<double>(x.n_expert_used) * x.expert_flops;
  std::vector<uint64_t> dense_bytes(static_cast<size_t>(L));
  std::vector<double> dense_flops(static_cast<size_t>(L));
  PipelineExpertPlan p;
  p.ep_size = E;
  p.lead_inputs = in.layers;
  for (int64_t l = 0; l < L; ++l) {
    const auto i = static_cast<size_t>(l);
    const uint64_t b = in.layers.layer_bytes[i];
    const double f = in.layers.layer_flops_per_token[i];
    dense_bytes[i] = in.routed[i] ? b - std::min(b, all_experts) : b;
    dense_flops[i] = in.routed[i] ? std::max(0.0, f - all_flops) : f;
    p.lead_inputs.layer_bytes[i] =
        dense_bytes[i] + (in.routed[i] ? static_cast<uint64_t>(lead_share) * x.expert_bytes : 0);
    p.lead_inputs.layer_flops_per_token[i] =
        dense_flops[i] + (in.routed[i] ? all_flops * static_cast<double>(lead_share) / static_cast<double>(x.n_expert)
                                       : 0.0);
  }
  p.lead_inputs.layer_slot_bytes.clear();  // a lead streams its share's experts, not whole layers
  p.lead_inputs.layer_pinned_bytes.clear();
  p.lead_inputs.layer_read_bytes.clear();  // its layers as layer_bytes hold them
  p.lead_inputs.n_expert = lead_share;     // its pool: its share of each routed layer
  p.lead_inputs.expert_pick = static_cast<double>(x.n_expert_used) / static_cast<double>(x.n_expert);
  p.lead_inputs.ranks.clear();
  p.lead_inputs.links.clear();
  for (int64_t g = 0; g < P; ++g) {
    p.lead_inputs.ranks.push_back(in.ranks[static_cast<size_t>(g * E)]);
    p.lead_inputs.links.push_back(in.links[static_cast<size_t>(g * E)]);
  }
  ASSIGN_OR_RETURN(p.pipeline, plan_pipeline(p.lead_inputs));

  // Step 2: each stage's experts over its group.
  std::string refusal;
  for (int64_t g = 0; g < P; ++g) {
    const LayerRange range = p.pipeline.ranges[static_cast<size_t>(g)];
    ExpertParallelInputs s = x;
    s.n_routed_layers = 0;
    s.dense_bytes = g == 0 ? in.layers.head_bytes : 0;
    s.dense_read_bytes = g == 0 ? in.layers.head_read_bytes : 0;
    s.dense_flops_per_token = g == 0 ? in.layers.head_flops_per_token : 0;
    for (int64_t l = range.begin; l < range.end; ++l) {
      const auto i = static_cast<size_t>(l);
      s.n_routed_layers += in.routed[i] ? 1 : 0;
      s.dense_bytes += dense_bytes[i];
      s.dense_read_bytes += dense_bytes[i];
      s.dense_flops_per_token += dense_flops[i];
    }
    if (s.n_routed_layers == 0)
      return invalid_argument("stage {} (layers {}-{}) holds no routed layer, so its {} expert ranks would idle: use "
                              "fewer stages or a smaller --ep-size",
                              g, range.begin, range.end - 1, E - 1);
    s.attention = EpAttention::kRank0;  // the stage's lead runs attention; its expert ranks hold experts alone
    // A share beyond its rank's budget streams (expert_parallel_plan.h); the
    // lead's resident part is its range's dense parts (and stage 0's head)
    // as the cut counted them.
    s.dense_resident_bytes = g == 0 ? in.layers.head_bytes : 0;
    const bool dense_laid_out = in.layers.layer_dense_bytes.size() == static_cast<size_t>(L);
    for (int64_t l = range.begin; l < range.end; ++l)
      s.dense_resident_bytes += dense_laid_out ? in.layers.layer_dense_bytes[static_cast<size_t>(l)]
                                               : dense_bytes[static_cast<size_t>(l)];
    s.ranks.assign(in.ranks.begin() + g * E, in.ranks.begin() + (g + 1) * E);
    s.links.assign(in.links.begin() + g * E, in.links.begin() + (g + 1) * E);
    // The lead fits (the cut counted it); the others' shares must too, in
    // memory or streaming.
    for (int64_t m = 1; m < E; ++m) {
      const int64_t n_share = (m + 1) * x.n_expert / E - m * x.n_expert / E;
      const uint64_t need = static_cast<uint64_t>(n_share * s.n_routed_layers) * x.expert_bytes;
      const uint64_t least = static_cast<uint64_t>(n_share) * x.expert_slot_bytes;
      const RankResources& k = s.ranks[static_cast<size_t>(m)];
      const bool can_stream = k.budget_given && k.disk_gbps > 0 && x.expert_slot_bytes > 0;
      if (need <= k.mem_cap_bytes || (can_stream && least <= k.mem_cap_bytes)) continue;
      const std::string why = share_stream_refusal(k, x.expert_slot_bytes, 0, n_share);
      refusal += fmt::format("{}rank {} (stage {}) needs {:.2f} MiB for experts {}-{} of layers {}-{} and may hold "
                             "{:.2f} MiB ({}){}",
                             refusal.empty() ? "" : "; ", p.rank_of(g, m), g, mib(need), m * x.n_expert / E,
                             (m + 1) * x.n_expert / E - 1, range.begin, range.end - 1, mib(k.mem_cap_bytes),
                             k.budget_given ? "its --mem-budget" : "memory available", why);
    }
    if (!refusal.empty()) continue;
    StatusOr<ExpertParallelPlan> e = plan_expert_parallel(s);
    if (!e.ok()) return e.status();
    p.stages.push_back(*std::move(e));
  }
  if (!refusal.empty())
    return resource_exhausted("the stages' experts do not fit their ranks, in memory or streaming: {}; raise "
                              "--mem-budget, or run more ranks per stage",
                              refusal);
  return p;
}

}  // namespace sluice::plan
