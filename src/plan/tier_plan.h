// Three tiers on a GPU: which weights sit in HBM, which in pinned host RAM and
// which are read from the model file, from two budgets and four measured
// rates, and what each leg costs a decode step and a prefill (issue #43; seed
// 000's weight streaming, seed 002's three-tier pipeline).
//
//   disk ──(disk_gbps, O_DIRECT)──> pinned host ──(h2d_gbps)──> HBM ──(hbm_gbps, FLOP/s)──> compute
//   [layers/experts on disk only]   [host-resident + 2 staging]  [resident + ring of K slots]
//
// Units. A dense model moves whole layers: L = block bytes / n_layer (the
// average; WeightBytes::layer_bytes). A routed model keeps every layer's dense
// part (attention, shared FFN, router, norms) in HBM and moves single experts
// of X = routed expert bytes / (n_layer_moe x n_expert). The essentials E
// (embedding, output head: everything outside the blocks) stay in HBM always.
//
// Placement, dense (G = the HBM budget, M = the host budget; 0 = unlimited):
//   1. E + n_layer L <= G: every layer in HBM, no ring, nothing else moves.
//   2. Otherwise the HBM holds E, a ring of 2 layer slots and
//      n_hbm = floor((G - E) / L) - 2 resident layers; G < E + 2L is refused
//      with E + 2L, the smallest budget that streams at all.
//      The ring's K is seed 002's, from plan_stream() over the n_s = n_layer -
//      n_hbm streamed layers, each hidden behind the compute of the n_layer /
//      n_s layers around it (resident layers are spread between streamed ones,
//      plan::streamed_in_spread): c' = C / n_s. K_planned > 2 exactly when
//      L / h2d > c', i.e. when n_s L / h2d > C: the step is then link-bound
//      whatever the ring, so the ring stays at 2 slots and the budget keeps
//      layers resident instead (each spares a transfer a step; a slot spares
//      none). So K in use is 2 and K_planned is reported beside it.
//   3. The n_s streamed layers live in pinned host RAM while they fit M; past
//      that the host holds 2 staging slots (one being read from the file while
//      the other is copied to HBM) and n_host = floor(M / L) - 2 layers, the
//      other n_disk are read from the file every step. M < 2L with a layer
//      to read is refused with 2L. Seed 002's host buffer (plan_stream's
//      host_buffer_layers over the streamed layers, all read from the file)
//      is reported as the layers the host would need to hold beyond the ring
//      for the disk to keep up during a prefill pass (the seed's step is a
//      training pass of many tokens; at one token the planned K exceeds the
//      streamed layers and the formula says nothing).
//   Which layers: the streamed ones by streamed_in_spread over all layers, the
//   disk ones by streamed_in_spread again over the streamed ones.
// Placement, routed: the HBM holds E, the dense parts and S_hbm =
// floor((G - E - dense) / X) expert slots (plan_expert_stream(): its fits rule,
// at least one routed layer's n_expert slots, is the HBM's minimum); the host
// holds S_host = min(N - S_hbm, floor(M / X) - 2) of the N - S_hbm others (the
// rest of M: 2 staging slots; M < 2X with an expert to read is refused), the
// rest stay on disk.
//
// Step of T tokens (decode: T sequences of one token; prefill: one prompt):
//   C(T)      = max(R(T) / hbm, 2 A T / FLOP/s)    the roofline on the weights,
//               R(T) = WeightBytes::matrix_read_bytes(T), A = active matmul params;
//               KV reads and attention FLOPs are not counted
//   dense:  h2d_s  = n_s L / h2d,          disk_s = n_disk L / disk
//   routed: h2d_s  = plan_expert_stream's read time with the link as its "disk":
//                    (1 - h) d n_moe X / h2d, h = expected_hit_rate(S_hbm, ...),
//                    d = distinct experts a step chooses per routed layer
//           disk_s = the misses not in host: h2d bytes x (1 - S_host / (N - S_hbm)) / disk
//           boundary_s = plan_expert_stream's: the legs wait at each step boundary
//                    for the next step's experts to be known
//   step_s    = max(C, h2d_s + boundary_s, disk_s + boundary_s)
//   stall_s   = step_s - C; per token: stall_s / T
//   bound     = the leg that sets step_s (compute, link or disk)
// The legs run at once (the file read, the copy engine and the compute), each
// layer passing through them in turn, so the slowest sets the step (seed 002's
// "the slowest leg determines throughput"); contention between the file
// reads and the copies on the host's PCIe lanes is not modeled.
// Pure functions over plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/model_shape.h"
#include "plan/stream_plan.h"
#include "plan/weight_bytes.h"
#include "sluice/status.h"

namespace sluice::plan {

// Measured rates of one GPU machine. The defaults a caller states are an
// H200's: HBM copy roof ~4200 GB/s, pinned H2D ~50 GB/s, NVMe ~6 GB/s.
struct TierRates {
  double hbm_gbps = 0;    // HBM read rate, GB/s
  double h2d_gbps = 0;    // pinned host -> device copies, GB/s
  double disk_gbps = 0;   // O_DIRECT reads of the model file, GB/s
  double gpu_tflops = 0;  // achieved matmul rate, TFLOP/s
};

// An H200's, as stated above (not measured here): what a run uses until
// `sluice gpu-bench` figures are given.
constexpr TierRates h200_tier_rates() {
  return TierRates{.hbm_gbps = 4200, .h2d_gbps = 50, .disk_gbps = 6, .gpu_tflops = 989};
}
struct TierInputs {
  ModelShape shape;
  WeightBytes weights;
  TierRates rates;
  double gpu_budget_bytes = 0;   // HBM for weights (resident, ring, expert slots); 0: unlimited
  double host_budget_bytes = 0;  // pinned host RAM for weights (resident, staging); 0: unlimited
  int64_t decode_tokens = 1;     // sequences in a decode step, one token each
  int64_t prefill_tokens = 512;  // a prompt's tokens in one prefill step (pp512)
};

enum class Tier3 { kHbm, kHost, kDisk };

// One step's legs.
struct TierStep {
  int64_t n_tokens = 0;
  double compute_s = 0;          // C(T)
  double h2d_bytes = 0;          // bytes copied host -> HBM a step
  double disk_bytes = 0;         // bytes read from the file a step
  double h2d_s = 0;
  double disk_s = 0;
  double boundary_s = 0;         // routed only
  double step_s = 0;
  double stall_s = 0;            // step_s - compute_s
  double stall_per_token_s = 0;  // stall_s / n_tokens
  double tokens_per_s = 0;
  StreamBound bound = StreamBound::kCompute;
  int64_t n_ring_slots_planned = 0;  // plan_stream's K at this step's compute (dense; 0 if nothing streams)
  double hbm_hit_rate = 1;       // routed: chosen experts found in HBM
  double host_hit_rate = 1;      // routed: HBM misses found in host RAM
};

struct TierPlan {
  bool routed = false;
  int64_t n_layer = 0;
  double essentials_bytes = 0;   // E
  double unit_bytes = 0;         // L (dense) or X (routed): what moves
  double dense_bytes = 0;        // routed: the dense parts kept in HBM
  // Dense: layers per tier, and the map (one letter a layer: G HBM, H host, D disk).
  int64_t n_hbm_layers = 0;
  int64_t n_host_layers = 0;
  int64_t n_disk_layers = 0;
  std::string layer_map;
  // Routed: experts per tier (S_hbm is a pool of slots, the others fixed sets).
  int64_t n_experts = 0;         // N = n_layer_moe x n_expert
  int64_t n_hbm_experts = 0;
  int64_t n_host_experts = 0;
  int64_t n_disk_experts = 0;
  // Buffers.
  int64_t n_ring_slots = 0;          // in HBM, in use (0: nothing streams)
  int64_t n_ring_slots_planned = 0;  // plan_stream's K at the decode step
  int64_t n_staging_slots = 0;       // in pinned host, for file reads (0: nothing read)
  double host_buffer_layers_planned = 0;  // seed 002's host buffer at the prefill step (dense)
  // Bytes per tier, each within its budget.
  double hbm_bytes = 0;
  double host_bytes = 0;
  double disk_only_bytes = 0;
  // Smallest budgets that stream at all (what a refusal names).
  double min_gpu_budget_bytes = 0;
  double min_host_budget_bytes = 0;
  TierStep decode;
  TierStep prefill;
  std::string note;
};

// Errors: non-positive rates or token counts, an invalid shape (invalid
// argument); a budget below the minimum above (resource exhausted, naming the
// smallest budget that works).
StatusOr<TierPlan> plan_tiers(const TierInputs& in);

// The fluid split's price list (plan/fluid_split.h): entry k is the decode
// step time with the HBM budget k units (layers, or experts when routed)
// smaller than `in`'s, minus the step time at `in`'s budget; entry 0 is 0. It
// stops at max_units or at the first budget plan_tiers refuses.
StatusOr<std::vector<double>> demotion_costs(const TierInputs& in, int64_t max_units);

// The placement map of a plan: per tier bytes, layers or experts, buffers,
// and each step's legs with the bound and stall.
std::string tier_map(const TierPlan& p, const TierInputs& in);

}  // namespace sluice::plan
