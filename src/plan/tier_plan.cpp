#include "plan/tier_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plan/expert_plan.h"

namespace sluice::plan {

namespace {

std::string gb(double bytes) { return fmt::format("{:.3f} GB", bytes / 1e9); }

// C(T): the roofline on the weights a step of T tokens multiplies.
double compute_s(const TierInputs& in, int64_t n_tokens) {
  const double read = in.weights.matrix_read_bytes(n_tokens);
  const double flops = 2.0 * static_cast<double>(count_params(in.shape).active_matmul()) * static_cast<double>(n_tokens);
  return std::max(read / (in.rates.hbm_gbps * 1e9), flops / (in.rates.gpu_tflops * 1e12));
}

// step = max(C, h2d + boundary, disk + boundary); the bound is the leg that sets it.
void finish_step(TierStep& s) {
  const double link = s.h2d_s > 0 ? s.h2d_s + s.boundary_s : 0.0;
  const double disk = s.disk_s > 0 ? s.disk_s + s.boundary_s : 0.0;
  s.step_s = std::max({s.compute_s, link, disk});
  s.bound = s.step_s == s.compute_s ? StreamBound::kCompute
            : s.step_s == link      ? StreamBound::kLink
                                    : StreamBound::kDisk;
  s.stall_s = s.step_s - s.compute_s;
  s.stall_per_token_s = s.stall_s / static_cast<double>(s.n_tokens);
  s.tokens_per_s = static_cast<double>(s.n_tokens) / s.step_s;
}

// The host tier over `n_moving` units of `unit` bytes that the HBM does not
// hold: how many it keeps, and its 2 staging slots when some must be read.
struct HostSplit {
  int64_t n_host = 0;
  int64_t n_disk = 0;
  int64_t n_staging = 0;
};
StatusOr<HostSplit> split_host(double host_budget, int64_t n_moving, double unit, const char* what) {
  HostSplit h;
  if (host_budget <= 0 || static_cast<double>(n_moving) * unit <= host_budget) {
    h.n_host = n_moving;
    return h;
  }
  const auto fit = static_cast<int64_t>(std::floor(host_budget / unit));
  if (fit < 2) {
    return resource_exhausted("--mem-budget {} cannot stage {} read from the file: 2 staging slots of {} need {} "
                              "({:.0f} bytes), the smallest host budget that works",
                              gb(host_budget), what, gb(unit), gb(2 * unit), std::ceil(2 * unit));
  }
  h.n_staging = 2;
  h.n_host = fit - 2;
  h.n_disk = n_moving - h.n_host;
  return h;
}

StatusOr<TierStep> dense_step(const TierInputs& in, const TierPlan& p, int64_t n_tokens) {
  TierStep s{.n_tokens = n_tokens};
  s.compute_s = compute_s(in, n_tokens);
  const int64_t n_s = p.n_host_layers + p.n_disk_layers;
  s.h2d_bytes = static_cast<double>(n_s) * p.unit_bytes;
  s.disk_bytes = static_cast<double>(p.n_disk_layers) * p.unit_bytes;
  s.h2d_s = s.h2d_bytes / (in.rates.h2d_gbps * 1e9);
  s.disk_s = s.disk_bytes / (in.rates.disk_gbps * 1e9);
  if (n_s > 0) {
    // Seed 002's ring over the streamed layers, each hidden behind the compute
    // of the layers around it: c' = C / n_s (a layer of c' seconds is c' x
    // 1e12 FLOPs at 1 TFLOP/s).
    const double c_per_streamed = s.compute_s / static_cast<double>(n_s);
    ASSIGN_OR_RETURN(StreamPlan sp, plan_stream({.n_layer = n_s,
                                                 .layer_bytes = p.unit_bytes,
                                                 .layer_flops = c_per_streamed * 1e12,
                                                 .compute_tflops = 1.0,
                                                 .link_gbps = in.rates.h2d_gbps,
                                                 .disk_gbps = p.n_disk_layers > 0 ? in.rates.disk_gbps : 0.0}));
    s.n_ring_slots_planned = sp.n_ring_slots;
  }
  finish_step(s);
  return s;
}

StatusOr<TierPlan> plan_dense(const TierInputs& in, TierPlan p) {
  const int64_t n = p.n_layer;
  const double E = p.essentials_bytes, L = p.unit_bytes, G = in.gpu_budget_bytes;
  p.min_gpu_budget_bytes = E + 2 * L;
  if (G <= 0 || E + static_cast<double>(n) * L <= G) {
    p.n_hbm_layers = n;
  } else {
    if (G < p.min_gpu_budget_bytes) {
      return resource_exhausted("--gpu-budget {} cannot work: the essentials {} and a ring of 2 layer slots of {} "
                                "need {} ({:.0f} bytes), the smallest GPU budget that streams",
                                gb(G), gb(E), gb(L), gb(p.min_gpu_budget_bytes), std::ceil(p.min_gpu_budget_bytes));
    }
    p.n_hbm_layers = static_cast<int64_t>(std::floor((G - E) / L)) - 2;
    p.n_ring_slots = 2;
  }
  const int64_t n_s = n - p.n_hbm_layers;
  p.min_host_budget_bytes = n_s > 0 ? 2 * L : 0;
  ASSIGN_OR_RETURN(HostSplit h, split_host(in.host_budget_bytes, n_s, L, "layers"));
  p.n_host_layers = h.n_host;
  p.n_disk_layers = h.n_disk;
  p.n_staging_slots = h.n_staging;
  for (int64_t l = 0, j = 0; l < n; ++l) {
    if (!streamed_in_spread(l, n, n_s)) {
      p.layer_map += 'G';
      continue;
    }
    p.layer_map += streamed_in_spread(j++, n_s, p.n_disk_layers) ? 'D' : 'H';
  }
  p.hbm_bytes = E + static_cast<double>(p.n_hbm_layers + p.n_ring_slots) * L;
  p.host_bytes = static_cast<double>(p.n_host_layers + p.n_staging_slots) * L;
  p.disk_only_bytes = static_cast<double>(p.n_disk_layers) * L;
  ASSIGN_OR_RETURN(p.decode, dense_step(in, p, in.decode_tokens));
  ASSIGN_OR_RETURN(p.prefill, dense_step(in, p, in.prefill_tokens));
  p.n_ring_slots_planned = p.decode.n_ring_slots_planned;
  if (n_s > 0) {
    // Seed 002's host buffer is a pass of many tokens (its training step):
    // sized at the prefill's compute, where the ring is 2 and the formula holds.
    const double c_per_streamed = p.prefill.compute_s / static_cast<double>(n_s);
    ASSIGN_OR_RETURN(StreamPlan sp, plan_stream({.n_layer = n_s, .layer_bytes = L, .layer_flops = c_per_streamed * 1e12,
                                                 .compute_tflops = 1.0, .link_gbps = in.rates.h2d_gbps,
                                                 .disk_gbps = in.rates.disk_gbps}));
    p.host_buffer_layers_planned = sp.host_buffer_layers;
    if (p.n_ring_slots_planned > p.n_ring_slots) {
      p.note = fmt::format("the ring stays at {} slots, not the planned K={}: a layer's copy outlasts the compute "
                           "between streamed layers, so the step is link-bound with any ring, and the budget holds "
                           "resident layers instead (each spares a copy a step)",
                           p.n_ring_slots, p.n_ring_slots_planned);
    }
  }
  return p;
}

StatusOr<TierStep> routed_step(const TierInputs& in, const TierPlan& p, int64_t n_tokens) {
  TierStep s{.n_tokens = n_tokens};
  if (p.n_hbm_experts >= p.n_experts) {
    s.compute_s = compute_s(in, n_tokens);
    finish_step(s);
    return s;
  }
  // The HBM level is plan_expert_stream with the link as its "disk".
  ASSIGN_OR_RETURN(ExpertStreamPlan e,
                   plan_expert_stream({.shape = in.shape, .weights = in.weights,
                                       .hw = {.name = "gpu", .mem_gbps = in.rates.hbm_gbps,
                                              .peak_tflops = in.rates.gpu_tflops},
                                       .disk_gbps = in.rates.h2d_gbps, .mem_budget_bytes = in.gpu_budget_bytes,
                                       .tokens_per_step = n_tokens}));
  s.compute_s = e.compute_s;
  s.hbm_hit_rate = e.hit_rate;
  s.h2d_bytes = e.read_bytes;
  s.h2d_s = e.disk_s;
  s.boundary_s = e.boundary_s;
  const int64_t outside = p.n_experts - p.n_hbm_experts;
  s.host_hit_rate = static_cast<double>(p.n_host_experts) / static_cast<double>(outside);
  s.disk_bytes = s.h2d_bytes * (1.0 - s.host_hit_rate);
  s.disk_s = s.disk_bytes / (in.rates.disk_gbps * 1e9);
  finish_step(s);
  return s;
}

StatusOr<TierPlan> plan_routed(const TierInputs& in, TierPlan p) {
  const ModelShape& sh = in.shape;
  const double experts = static_cast<double>(in.weights.of(TensorClass::kExperts));
  p.n_experts = sh.n_layer_moe() * sh.n_expert;
  p.unit_bytes = experts / static_cast<double>(p.n_experts);
  p.dense_bytes = static_cast<double>(in.weights.total()) - experts - p.essentials_bytes;
  const double resident = p.essentials_bytes + p.dense_bytes, X = p.unit_bytes, G = in.gpu_budget_bytes;
  p.min_gpu_budget_bytes = resident + static_cast<double>(sh.n_expert) * X;
  if (G <= 0 || resident + experts <= G) {
    p.n_hbm_experts = p.n_experts;
  } else {
    if (G < p.min_gpu_budget_bytes) {
      return resource_exhausted("--gpu-budget {} cannot work: the essentials and dense parts {} and one routed "
                                "layer's {} expert slots of {} need {} ({:.0f} bytes), the smallest GPU budget "
                                "that streams experts",
                                gb(G), gb(resident), sh.n_expert, gb(X), gb(p.min_gpu_budget_bytes),
                                std::ceil(p.min_gpu_budget_bytes));
    }
    p.n_hbm_experts = std::min(p.n_experts, static_cast<int64_t>(std::floor((G - resident) / X)));
  }
  const int64_t outside = p.n_experts - p.n_hbm_experts;
  p.min_host_budget_bytes = outside > 0 ? 2 * X : 0;
  ASSIGN_OR_RETURN(HostSplit h, split_host(in.host_budget_bytes, outside, X, "experts"));
  p.n_host_experts = h.n_host;
  p.n_disk_experts = h.n_disk;
  p.n_staging_slots = h.n_staging;
  p.n_hbm_layers = p.n_layer;  // every layer's dense part
  p.hbm_bytes = resident + static_cast<double>(p.n_hbm_experts) * X;
  p.host_bytes = static_cast<double>(p.n_host_experts + p.n_staging_slots) * X;
  p.disk_only_bytes = static_cast<double>(p.n_disk_experts) * X;
  ASSIGN_OR_RETURN(p.decode, routed_step(in, p, in.decode_tokens));
  ASSIGN_OR_RETURN(p.prefill, routed_step(in, p, in.prefill_tokens));
  if (outside > 0)
    p.note = "HBM expert slots are a pool: before a routed layer runs its predicted experts are copied into slots "
             "(the read-ahead), so no separate ring";
  return p;
}

}  // namespace

StatusOr<TierPlan> plan_tiers(const TierInputs& in) {
  RETURN_IF_ERROR(validate_shape(in.shape));
  const TierRates& r = in.rates;
  if (!(r.hbm_gbps > 0) || !(r.h2d_gbps > 0) || !(r.disk_gbps > 0) || !(r.gpu_tflops > 0))
    return invalid_argument("the tier plan needs positive HBM, host-to-device, disk and FLOP rates");
  if (in.decode_tokens < 1 || in.prefill_tokens < 1)
    return invalid_argument("decode and prefill tokens must be at least 1");
  if (in.gpu_budget_bytes < 0 || in.host_budget_bytes < 0) return invalid_argument("budgets must not be negative");
  TierPlan p;
  p.routed = in.shape.is_moe();
  p.n_layer = in.shape.n_layer;
  p.essentials_bytes = static_cast<double>(in.weights.total() - in.weights.block_bytes());
  if (p.routed) return plan_routed(in, std::move(p));
  p.unit_bytes = in.weights.layer_bytes();
  return plan_dense(in, std::move(p));
}

StatusOr<std::vector<double>> demotion_costs(const TierInputs& in, int64_t max_units) {
  ASSIGN_OR_RETURN(TierPlan base, plan_tiers(in));
  TierInputs smaller = in;
  // An unlimited budget is the one that holds everything.
  const double budget = in.gpu_budget_bytes > 0 ? in.gpu_budget_bytes : static_cast<double>(in.weights.total());
  std::vector<double> costs = {0.0};
  for (int64_t k = 1; k <= max_units; ++k) {
    smaller.gpu_budget_bytes = budget - static_cast<double>(k) * base.unit_bytes;
    if (smaller.gpu_budget_bytes <= 0) break;
    StatusOr<TierPlan> p = plan_tiers(smaller);
    if (!p.ok()) break;  // below the smallest budget that streams
    costs.push_back(p->decode.step_s - base.decode.step_s);
  }
  return costs;
}

std::string tier_map(const TierPlan& p, const TierInputs& in) {
  auto ms = [](double s) { return fmt::format("{:.3f} ms", s * 1e3); };
  std::string t;
  t += fmt::format("budgets   HBM {} for weights, host {} pinned{}\n",
                   in.gpu_budget_bytes > 0 ? gb(in.gpu_budget_bytes) : "unlimited",
                   in.host_budget_bytes > 0 ? gb(in.host_budget_bytes) : "unlimited",
                   fmt::format(" (smallest that stream: HBM {}, host {})", gb(p.min_gpu_budget_bytes),
                               gb(p.min_host_budget_bytes)));
  t += fmt::format("rates     HBM {:.0f} GB/s, host->HBM {:.1f} GB/s, disk {:.2f} GB/s, {:.0f} TFLOP/s\n",
                   in.rates.hbm_gbps, in.rates.h2d_gbps, in.rates.disk_gbps, in.rates.gpu_tflops);
  if (p.routed) {
    const double per = static_cast<double>(in.shape.n_layer_moe());
    t += fmt::format("hbm       {}: essentials and dense parts {} + {} expert slots of {} ({:.1f} a routed layer)\n",
                     gb(p.hbm_bytes), gb(p.essentials_bytes + p.dense_bytes), p.n_hbm_experts, gb(p.unit_bytes),
                     static_cast<double>(p.n_hbm_experts) / per);
    t += fmt::format("host      {}: {} experts ({:.1f} a routed layer) + {} staging slots\n", gb(p.host_bytes),
                     p.n_host_experts, static_cast<double>(p.n_host_experts) / per, p.n_staging_slots);
    t += fmt::format("disk      {}: {} experts ({:.1f} a routed layer) read when chosen\n", gb(p.disk_only_bytes),
                     p.n_disk_experts, static_cast<double>(p.n_disk_experts) / per);
  } else {
    t += fmt::format("hbm       {}: essentials {} + {} layers of {} + ring of {} slots (K planned {})\n",
                     gb(p.hbm_bytes), gb(p.essentials_bytes), p.n_hbm_layers, gb(p.unit_bytes), p.n_ring_slots,
                     p.n_ring_slots_planned);
    t += fmt::format("host      {}: {} layers + {} staging slots; seed 002's host buffer at the prefill: {:.1f} "
                     "layers\n",
                     gb(p.host_bytes), p.n_host_layers, p.n_staging_slots, p.host_buffer_layers_planned);
    t += fmt::format("disk      {}: {} layers read every step\n", gb(p.disk_only_bytes), p.n_disk_layers);
    t += fmt::format("layers    {} (G HBM, H host, D disk)\n", p.layer_map);
  }
  t += fmt::format("\n{:<8} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12} {:>10}  {}\n", "step", "tokens",
                   "compute", "h2d", "disk", "boundary", "step", "stall", "stall/token", "tokens/s", "bound");
  for (const auto& [name, s] : {std::pair<const char*, const TierStep&>{"decode", p.decode}, {"prefill", p.prefill}}) {
    t += fmt::format("{:<8} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>12} {:>10.1f}  {}\n", name, s.n_tokens,
                     ms(s.compute_s), ms(s.h2d_s), ms(s.disk_s), ms(s.boundary_s), ms(s.step_s), ms(s.stall_s),
                     ms(s.stall_per_token_s), s.tokens_per_s, stream_bound_name(s.bound));
  }
  if (p.routed && p.n_hbm_experts < p.n_experts) {
    t += fmt::format("experts   decode: {:.0f}% found in HBM, {:.0f}% of the rest in host; prefill: {:.0f}%, {:.0f}%\n",
                     100 * p.decode.hbm_hit_rate, 100 * p.decode.host_hit_rate, 100 * p.prefill.hbm_hit_rate,
                     100 * p.prefill.host_hit_rate);
  }
  if (!p.note.empty()) t += "note      " + p.note + "\n";
  return t;
}

}  // namespace sluice::plan
