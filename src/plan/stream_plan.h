// Streaming pipeline model: weights flow disk -> host buffer -> a ring of K
// layer slots in the compute tier while the compute tier works layer by layer.
//
//   disk ──(disk_gbps)──> host buffer ──(link_gbps)──> ring of K slots ──> compute
//
// Per layer (essay 002, "CPU->GPU weight streaming"):
//   compute_s  = layer_flops / compute FLOP/s
//   transfer_s = layer_bytes / link bandwidth
//   disk_s     = layer_bytes / disk bandwidth
//   K          = max(2, ceil(transfer_s / compute_s) + 1)           ring slots
//   host buffer layers = n_layer - K - n_layer x max(compute_s, transfer_s) / disk_s
//                (what the disk cannot deliver during one pass must be staged)
//   step_s     = n_layer x max(compute_s, transfer_s, disk_s)       steady state
// With link_gbps == 0 the ring is filled straight from disk (a CPU-only box, where
// host RAM is the compute tier); with disk_gbps == 0 the layers already sit in
// host memory. A configuration whose ring or host buffer exceeds its budget is
// refused with the reason in `verdict`, never silently degraded.
//
// This is the one sizing rule: the weight store calls plan_stream() to size its
// ring and host buffer, and `sluice plan stream` prints the same numbers.
// Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/hardware.h"
#include "sluice/status.h"

namespace sluice::plan {

struct StreamInputs {
  int64_t n_layer = 0;
  double layer_bytes = 0;          // bytes moved per layer per step (MoE: every expert)
  double layer_flops = 0;          // FLOPs per layer per step
  double compute_tflops = 0;       // achieved FLOP/s of the compute tier, in TFLOP/s
  double link_gbps = 0;            // host -> compute tier; 0: ring filled from disk
  double disk_gbps = 0;            // disk -> host; 0: layers resident in host memory
  double host_budget_bytes = 0;    // host buffer limit; 0: unlimited
  double device_budget_bytes = 0;  // ring limit; 0: unlimited
};

enum class StreamBound { kCompute, kLink, kDisk };
const char* stream_bound_name(StreamBound b);

struct StreamPlan {
  double compute_s = 0;            // per layer
  double transfer_s = 0;           // per layer, into the ring
  double disk_s = 0;               // per layer, disk -> host (0 without a disk leg)
  double layer_cycle_s = 0;        // max(compute_s, transfer_s)
  int64_t n_ring_slots = 0;        // K
  double ring_bytes = 0;           // K x layer_bytes
  double disk_delivered_layers = 0;// layers the disk delivers during one pass
  double host_buffer_layers = 0;   // layers staged in host memory
  double host_buffer_bytes = 0;
  double step_s = 0;               // n_layer x max(compute_s, transfer_s, disk_s)
  double compute_only_s = 0;       // n_layer x compute_s (all weights resident)
  double overhead = 0;             // step_s / compute_only_s - 1
  StreamBound bound = StreamBound::kCompute;
  bool fits = true;                // ring and host buffer within budget
  std::string verdict;
};

// Errors: non-positive layers, bytes, FLOPs or compute rate, or neither a link
// nor a disk bandwidth.
StatusOr<StreamPlan> plan_stream(const StreamInputs& in);

// The streamed layers' spread: of n_layer layers of which n_streamed stream,
// layer l streams when floor((l+1) n_streamed / n_layer) > floor(l n_streamed /
// n_layer), so each run of streamed layers has resident compute around it to
// hide transfers behind. The weight store's placement and the pipeline
// planner's map both place layers by it. 0 <= l < n_layer.
bool streamed_in_spread(int64_t l, int64_t n_layer, int64_t n_streamed);

// Tokens per step at which per-layer compute equals `leg_s` (the transfer or disk
// time to hide): leg_s x FLOP/s / (flops_per_param x active params per layer).
double tokens_to_hide(double leg_s, double layer_active_params, double flops_per_param, double compute_tflops);

// The configuration grid: for each disk and link, the smallest candidate token
// count per step whose plan fits the budgets (essay 002's "minimum feasible
// batch"), its step time, and the tokens at which streaming has no overhead.
struct StreamGridInputs {
  int64_t n_layer = 0;
  double layer_bytes = 0;
  double layer_active_params = 0;  // params per layer that do FLOPs (MoE: active share)
  double flops_per_param = 2;      // 2 per MAC for inference; x3 for training (fwd+bwd)
  double compute_tflops = 0;
  std::vector<Disk> disks;
  std::vector<Link> links;
  double host_budget_bytes = 0;
  double device_budget_bytes = 0;
  std::vector<int64_t> candidate_tokens;  // ascending; empty: 1K, 2K, ..., 32K
};

struct StreamGridCell {
  Disk disk;
  Link link;
  bool applicable = true;                 // false when the disks outrun the link
  std::optional<int64_t> min_tokens;      // none when no candidate fits
  StreamPlan plan;                        // at min_tokens
  double tokens_no_overhead = 0;          // compute covers both link and disk legs
};

StatusOr<std::vector<StreamGridCell>> plan_stream_grid(const StreamGridInputs& in);

}  // namespace sluice::plan
