// FluidControl: the fluid split at run time (plan/fluid_split.h's policy,
// applied between steps). Resident layers and the KV pool share one budget
// (--fluid-split with --mem-budget): the host's, the weight store's resident
// layers against a host KV pool; or, over three tiers on a device (with
// --gpu-budget), the HBM's, the device tier's layers against the device's
// KV pool. When the running
// sequences (or the first waiting request) need blocks the pool lacks, layers
// are demoted to the ring and the pool grows by their bytes, instead of
// preempting (or leaving the request waiting), when the planner's price says
// streaming costs less; when load drops, layers come back one at a time.
//
//   budget = floor + resident units x unit + pool blocks x block   (fixed)
//   demote k: k layers' buffers or device arenas freed (Model::demote_layer),
//             the pool's memory grown (Backend::resize_kv) and its limit raised
//   promote:  pool limit lowered; once the blocks past it drain (their
//             sequences free them) their memory goes back (resize_kv) and
//             the layer is read in or copied to the device again
//             (Model::promote_layer). A shortage before then cancels it.
//
// The KV store and the block pool are made for the most blocks the split can
// reach (every unit demoted; Backend::create_kv_reserved backs only the
// first); the pool's limit is the split's current size.
// Not thread-safe: the engine thread, between steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_store.h"
#include "plan/fluid_split.h"
#include "plan/tier_plan.h"
#include "sluice/status.h"

namespace sluice {

class Model;
namespace weights {
struct PlacementPlan;
}

struct FluidSetup {
  plan::FluidSplitConfig config;
  std::vector<int64_t> units;  // demotable layers, in demotion order (promoted in reverse); empty with slots
  // A routed model's expert pool as the units (0: the units are layers):
  // unit u is slots base_slots - (u+1) x slots_per_unit .. base_slots - u x slots_per_unit - 1.
  int64_t slots_per_unit = 0;
  int64_t base_slots = 0;
  int64_t n_blocks_start = 0;  // the pool with every unit resident
  int64_t n_blocks_max = 0;    // the pool with every unit demoted (the store's and the pool's ids)
  int64_t n_blocks_reachable = 0;  // the pool with every unit the price list covers demoted (admission's bound)
};

// The split for a model over a weight store placed by `store` beside a pool
// of n_pool_blocks blocks of block_bytes. On the host: the budget is the
// store's host buffers plus that pool, priced by ring_demotion_costs over the
// store's compute and transfer times. On a device (device_tiers: the three
// tiers' planner inputs): the device tier's arenas plus the pool, priced by
// plan::demotion_costs. A routed model's units are groups of expert slots,
// a routed layer's worth each: its expert pool's on the host (priced by the
// store's step at the hit rate the smaller pool gets), the device's slots of
// experts copied in on a device (priced by plan::demotion_costs). Errors:
// nothing can move (every layer streamed already, none streamed: no ring to
// demote into, slots for one routed layer only, or a device without three
// tiers).
StatusOr<FluidSetup> plan_fluid_split(const Model& model, const weights::PlacementPlan& store,
                                      const plan::TierInputs* device_tiers, int64_t n_pool_blocks, int64_t block_bytes,
                                      int64_t promote_hold_steps);

// What a shortage would cost otherwise this step (the engine's estimates).
// Infinite where the alternative never ends: the only running sequence
// preempting itself, or a request waiting while nothing runs (it fits the
// pool the split can reach, not the pool as it is).
struct FluidCosts {
  double preempt_cost_s = 0;  // recomputing the sequence a running shortage would preempt
  double wait_cost_s = 0;     // the first waiting request's wait if not admitted
  double horizon_steps = 1;   // decode steps the extra blocks stay held
};

class FluidControl {
 public:
  FluidControl(FluidSetup setup, Model& model, KvStore& kv);

  // One step of the policy over the scheduler's demand, applied: layers
  // demoted and the pool grown, or a promotion started or finished. Errors:
  // a layer failed to move (the split is left where it was; the caller may
  // stop calling).
  Status before_step(Scheduler& sched, const FluidCosts& costs);

  int64_t n_demoted() const { return state_.n_demoted; }
  int64_t n_units() const { return setup_.config.n_units; }
  int64_t n_demotions() const { return n_demotions_; }    // layers demoted, since start
  int64_t n_promotions() const { return n_promotions_; }  // layers promoted, since start
  bool promotion_pending() const { return pending_ >= 0; }
  const std::string& last_reason() const { return reason_; }
  const FluidSetup& setup() const { return setup_; }
  // One line for the load report.
  std::string describe() const;

 private:
  // Finishes a pending promotion once the blocks past the new limit drained.
  Status finish_promotion(Scheduler& sched);
  // Demotes unit u (a layer, or a group of expert slots), or promotes it back.
  Status move_unit(int64_t u, bool demote);

  FluidSetup setup_;
  Model& model_;
  KvStore& kv_;
  plan::FluidSplitState state_;
  int64_t pending_ = -1;  // the pool limit of a promotion waiting for its blocks to drain; -1: none
  int64_t n_demotions_ = 0, n_promotions_ = 0;
  std::string reason_;
};

}  // namespace sluice
