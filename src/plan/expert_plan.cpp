#include "plan/expert_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::plan {

double distinct_experts(int64_t n_expert, int64_t n_used, int64_t n_tokens) {
  if (n_expert <= 0 || n_tokens <= 0) return 0.0;
  const double e = static_cast<double>(n_expert);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(n_used) / e, static_cast<double>(n_tokens)));
}

double expected_hit_rate(int64_t n_slots, int64_t n_layer_moe, int64_t n_expert, double distinct_per_layer) {
  const double all = static_cast<double>(n_layer_moe * n_expert);
  const double s = static_cast<double>(n_slots);
  if (s >= all) return 1.0;
  if (all - distinct_per_layer <= 0) return 0.0;
  return std::clamp((s - distinct_per_layer) / (all - distinct_per_layer), 0.0, 1.0);
}

StatusOr<ExpertStreamPlan> plan_expert_stream(const ExpertStreamInputs& in) {
  const ModelShape& s = in.shape;
  if (!s.is_moe()) return invalid_argument("{}: expert streaming needs a mixture-of-experts model", s.name);
  if (!(in.disk_gbps > 0) || !(in.hw.mem_gbps > 0) || !(in.hw.peak_tflops > 0))
    return invalid_argument("expert streaming needs positive disk, memory and FLOP rates");
  if (in.tokens_per_step < 1) return invalid_argument("tokens per step must be at least 1");
  const int64_t n_moe = s.n_layer_moe();
  ExpertStreamPlan p;
  const double all_experts = static_cast<double>(in.weights.of(TensorClass::kExperts));
  p.expert_bytes = all_experts / static_cast<double>(n_moe * s.n_expert);
  p.resident_bytes = static_cast<double>(in.weights.total()) - all_experts;
  const double slot = p.expert_bytes * in.slot_overhead;
  const double pool = in.mem_budget_bytes - p.resident_bytes;
  p.n_slots = pool > 0 ? std::min<int64_t>(n_moe * s.n_expert, static_cast<int64_t>(pool / slot)) : 0;
  p.fits = p.n_slots >= s.n_expert;
  if (!p.fits) {
    p.verdict = fmt::format("the budget holds {} expert slots after the resident {:.2f} GB; a routed layer can "
                            "need all {}: at least {:.2f} GB",
                            std::max<int64_t>(0, p.n_slots), p.resident_bytes / 1e9, s.n_expert,
                            (p.resident_bytes + slot * static_cast<double>(s.n_expert)) / 1e9);
  }
  p.slots_per_layer = static_cast<double>(p.n_slots) / static_cast<double>(n_moe);
  p.distinct_per_layer = distinct_experts(s.n_expert, s.n_expert_used, in.tokens_per_step);
  p.hit_rate_measured = in.hit_rate.has_value();
  p.hit_rate = in.hit_rate ? std::clamp(*in.hit_rate, 0.0, 1.0)
                           : expected_hit_rate(p.n_slots, n_moe, s.n_expert, p.distinct_per_layer);
  p.read_bytes = (1.0 - p.hit_rate) * p.distinct_per_layer * p.expert_bytes * static_cast<double>(n_moe);
  p.active_bytes = in.weights.matrix_read_bytes(in.tokens_per_step);
  const ParamCount c = count_params(s);
  const double tokens = static_cast<double>(in.tokens_per_step);
  const double flops = 2.0 * static_cast<double>(c.active_matmul()) * tokens;
  // Roofline: the larger of reading the bytes and their matmul FLOPs.
  auto roofline_s = [&](double bytes, double flops) {
    return std::max(bytes / (in.hw.mem_gbps * 1e9), flops / (in.hw.peak_tflops * 1e12));
  };
  p.compute_s = roofline_s(p.active_bytes, flops);
  p.disk_s = p.read_bytes / (in.disk_gbps * 1e9);
  const double per_expert_tokens = tokens * static_cast<double>(s.n_expert_used) / p.distinct_per_layer;
  const double head_bytes = static_cast<double>(in.weights.tied_embeddings ? in.weights.of(TensorClass::kEmbedding)
                                                                           : in.weights.of(TensorClass::kOutput));
  const double dense_layer_bytes =
      static_cast<double>(in.weights.of(TensorClass::kAttention) + in.weights.of(TensorClass::kFfn)) /
      static_cast<double>(s.n_layer);
  const double expert_params = static_cast<double>(c.experts) / static_cast<double>(n_moe * s.n_expert);
  const double head_params = static_cast<double>(c.output > 0 ? c.output : c.embedding);
  p.boundary_s = roofline_s(p.expert_bytes, 2.0 * expert_params * per_expert_tokens) +
                 roofline_s(head_bytes, 2.0 * head_params * tokens) +
                 static_cast<double>(s.n_layer_dense) * dense_layer_bytes / (in.hw.mem_gbps * 1e9);
  p.step_s = std::max(p.compute_s, p.disk_s + p.boundary_s);
  p.tokens_per_s = tokens / p.step_s;
  if (p.fits)
    p.verdict = p.disk_s + p.boundary_s > p.compute_s
                    ? "disk-bound: the experts a step misses take longer to read than the step computes"
                    : "compute-bound: the misses are read while the step computes";
  return p;
}

}  // namespace sluice::plan
