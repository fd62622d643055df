// Replaying a model's routing through an expert cache: how many of the experts
// each routed layer chose were ready when it ran, what a predictor got right,
// and how many experts had to be read, for a cache policy and a slot count.
//
// The trace is what the model reported per step and routed layer: the experts
// its routing chose for the step's tokens, and the experts predicted for that
// layer before it ran (model/model.h, predict_experts). The replay follows the
// order the weight store sees at run time:
//
//   predict(l): each predicted expert not cached is read (a prefetch) and
//               protected; the experts layer l-1 holds stay pinned
//   route(l):   each chosen expert is a hit if cached (prefetched or kept),
//               else read on demand (a miss); all are pinned, the layer's
//               protections dropped, their use counted
//   release(l): unpinned
//
// Counted per layer in ExpertLayerStats (expert_stats.h).
//
// When reads land: with ReplayOptions::disk_bytes_per_s == 0, at once (every
// prefetch is in memory when its layer routes: ready = cached). Otherwise
// the replay keeps a clock and a disk that reads one expert at a time at that
// rate, critical reads before prefetches, oldest first, as the arbiter does:
//
//   time ─────────────────────────────────────────────────────────────────>
//   layer l-1:  route ─ wait for its experts ─ compute (layer_s) ─┐
//   predict(l): issued when layer l-1 begins computing             │
//   route(l):   ───────────────────────────────────────────────────┘ at its end
//
// At route(l) a chosen expert is ready if its read has landed, late if it is
// still queued or reading (promoted to critical; late by landing - routing),
// missed if not cached (read at critical priority); predictions not chosen
// and not yet begun are dropped. The layer computes once all its chosen
// experts have landed. Pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/expert_cache.h"
#include "weights/expert_stats.h"

namespace sluice::weights {

struct RoutingTrace {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  int64_t n_used = 0;
  struct Layer {
    std::vector<int32_t> chosen;     // [n_tok * n_used]; empty for dense layers
    std::vector<int32_t> predicted;  // [n_tok * candidates] (-1: none) or empty (no prediction)
  };
  std::vector<std::vector<Layer>> steps;  // [step][layer]
};

struct ReplayOptions {
  int64_t n_slots = 0;
  CachePolicy policy = CachePolicy::kUsage;
  bool use_prediction = true;
  // Arrival times: the measured disk rate (0: reads land at once), one
  // expert's bytes, and the compute time of one routed layer in one step.
  double disk_bytes_per_s = 0;
  uint64_t expert_bytes = 0;
  double layer_s = 0;
};

// Per layer (dense layers all zero). Errors are the caller's: CHECKs that the
// trace fits n_layer x n_expert and that a step's layer needs at most n_slots.
std::vector<ExpertLayerStats> replay_routing(const RoutingTrace& trace, const ReplayOptions& options);

// The per-layer table (recall, precision, predictor fetch ratio, ready rate,
// late and missed shares, mean lateness, reads per step and per chosen
// expert), with the totals.
std::string replay_table(const std::vector<ExpertLayerStats>& layers, int64_t n_steps);
// Sums over layers [first, last].
ExpertLayerStats replay_total(const std::vector<ExpertLayerStats>& layers, int64_t first = 0, int64_t last = -1);

}  // namespace sluice::weights
