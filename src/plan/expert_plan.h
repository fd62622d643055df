// Expert streaming in the performance model: a routed model whose experts do
// not all fit the budget, its dense part resident and the rest of the budget a
// pool of expert slots filled from disk (the weight store's expert placement,
// weights/expert_store.h, runs exactly this plan).
//
//   per routed layer, a step of T tokens chooses
//     distinct(T) = E (1 - (1 - k/E)^T)        experts (uniform routing)
//   of which a share h (the hit rate) is already in a slot (expected_hit_rate):
//     h = (S - d) / (L E - d)                  S slots, L routed layers, d = distinct(T)
//   (uniform routing): before a routed layer runs, the experts predicted for it
//   are read into slots of their own, so about d slots hold the coming layer's
//   read-ahead and the other S - d keep earlier steps' experts, a uniform share
//   of the L E - d others. (Without prediction it would be S / (L E).)
//   So the disk reads  (1 - h) x distinct(T) x expert bytes  per routed layer.
//   step_s = max(compute_s, disk_s + boundary_s)  transfers overlap compute (prefetch),
//     compute_s = max(bytes the step multiplies / memory rate, FLOPs / FLOP rate)
//     disk_s    = bytes read / disk rate
//     boundary_s = what the disk waits for at each step boundary: the next
//                  step's first routed layer can be predicted only once its
//                  tokens are known, so after the step's last read come the
//                  last expert's compute and the output head, and before the
//                  next step's first read its dense leading layers
// A measured hit rate (the run's counters) can replace the uniform estimate:
// "step time under a budget given a hit rate".
// Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan/hardware.h"
#include "plan/model_shape.h"
#include "plan/weight_bytes.h"
#include "sluice/status.h"

namespace sluice::plan {

struct ExpertStreamInputs {
  ModelShape shape;                 // routed (n_expert > 0)
  WeightBytes weights;              // stored bytes by class (from a file, or a shape and format)
  Hardware hw;                      // memory rate and FLOP rate of the compute tier
  double disk_gbps = 0;             // disk -> compute tier
  double mem_budget_bytes = 0;      // for all weights
  int64_t tokens_per_step = 1;
  std::optional<double> hit_rate;   // measured; else the uniform estimate
  double slot_overhead = 1.0;       // slot bytes / expert bytes (alignment of its three extents)
};

struct ExpertStreamPlan {
  double expert_bytes = 0;          // one expert's three matrices
  double resident_bytes = 0;        // everything but the routed experts
  int64_t n_slots = 0;              // experts the pool holds
  double slots_per_layer = 0;
  double distinct_per_layer = 0;    // experts a step chooses per routed layer
  double hit_rate = 0;
  bool hit_rate_measured = false;
  double read_bytes = 0;            // experts read from disk per step
  double active_bytes = 0;          // weight bytes the step multiplies
  double compute_s = 0;
  double disk_s = 0;
  double boundary_s = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  bool fits = true;                 // the budget holds the resident part and one layer's experts
  std::string verdict;
};

// Errors: a dense shape, non-positive rates.
StatusOr<ExpertStreamPlan> plan_expert_stream(const ExpertStreamInputs& in);

// Expected distinct experts a step of n_tokens chooses per routed layer.
double distinct_experts(int64_t n_expert, int64_t n_used, int64_t n_tokens);

// The expected hit rate above: (n_slots - distinct) / (n_layer_moe * n_expert
// - distinct), in [0, 1]; 1 once every expert has a slot.
double expected_hit_rate(int64_t n_slots, int64_t n_layer_moe, int64_t n_expert, double distinct_per_layer);

}  // namespace sluice::plan
