// The fluid HBM split: weights and the KV pool share one GPU budget, and each
// scheduler step this policy decides whether resident weight units (layers,
// or experts of a routed model) are demoted to streamed ones to give the KV
// pool blocks, or promoted back when load drops (seed 000: "a fluid
// partition that can shift the boundary in real time as request load
// changes"; issue #43).
//
//   budget = floor_bytes + n_resident x unit_bytes + n_kv_blocks x kv_block_bytes + slack
//            (essentials,   demotable units         the KV pool               < one block)
//            ring, dense)
//
// Contract, per step (decide_fluid_split):
//   - Never exceeds the budget: the decision's n_kv_blocks is
//     floor((budget - floor - n_resident x unit) / kv_block) for its own
//     n_resident, and n_resident is never below 0 nor above n_units.
//   - Never takes blocks in use: a promotion happens only when the pool
//     without the unit's blocks still holds every block in use, the blocks
//     the running sequences need this step, and `promote_reserve_blocks`.
//   - Demotes only to avoid a cost, and only when the planner says streaming
//     is cheaper. With short = the blocks the running sequences need this
//     step beyond the free ones, the alternative is preempting them (cost:
//     `preempt_cost_s`, the time to recompute their tokens); with no such
//     shortage but a waiting request that does not fit, the alternative is
//     leaving it waiting (cost: `wait_cost_s`, its expected queue wait). The
//     policy demotes the fewest units k whose bytes give the pool `short`
//     more blocks (all of the shortage or none) when
//         (demote_cost_s[n_demoted + k] - demote_cost_s[n_demoted]) x horizon_steps  <  avoided cost
//     i.e. the decode time the whole batch loses over the steps those blocks
//     stay held is less than the time the preemption or the wait costs.
//     demote_cost_s is the planner's price list (plan::demotion_costs: extra
//     decode step seconds with k units demoted); no entry for k (the HBM
//     cannot stream that many) means no demotion.
//   - Promotes with hysteresis: one unit at a time, only after
//     `promote_hold_steps` consecutive steps without a shortage (running or
//     waiting) in which the pool could give up that unit's blocks and keep
//     the reserve. A step with a shortage resets the count, so a load that
//     alternates between pressure and calm never promotes, and a unit just
//     demoted stays demoted at least promote_hold_steps steps (no flapping).
// Thread-safety: pure functions over plain values; the state is the caller's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::plan {

struct FluidSplitConfig {
  double budget_bytes = 0;       // the one GPU budget: weights and the KV pool
  double floor_bytes = 0;        // never demoted: essentials, the ring, dense parts
  double unit_bytes = 0;         // one demotable unit (a layer's, or an expert's, bytes)
  int64_t n_units = 0;           // demotable units, all resident when none is demoted
  double kv_block_bytes = 0;     // one KV block (all layers)
  std::vector<double> demote_cost_s;  // [k]: decode step seconds added with k units demoted; [0] = 0
  int64_t promote_hold_steps = 8;     // calm steps before a promotion
  int64_t promote_reserve_blocks = 0; // free blocks a promotion must leave
};

// What the scheduler reports for this step.
struct FluidLoad {
  int64_t n_blocks_used = 0;          // blocks held by running sequences
  int64_t n_blocks_running_need = 0;  // more blocks the running sequences need this step
  int64_t n_blocks_waiting_need = 0;  // blocks the first waiting request needs to be admitted (0: none waits)
  double preempt_cost_s = 0;          // recomputing the sequences a shortage would preempt
  double wait_cost_s = 0;             // the first waiting request's expected wait if not admitted
  double horizon_steps = 1;           // decode steps the extra blocks stay held
};

struct FluidSplitState {
  int64_t n_demoted = 0;   // units streamed instead of resident
  int64_t calm_steps = 0;  // consecutive steps without a shortage
};

enum class FluidAction { kKeep, kDemote, kPromote };

struct FluidDecision {
  FluidAction action = FluidAction::kKeep;
  FluidSplitState next;        // the state after this step
  int64_t n_kv_blocks = 0;     // the pool's size after this step
  double weight_bytes = 0;     // floor + resident units
  std::string reason;          // one line: which cost won, or why nothing moved
};

// Errors: a budget below the floor and every unit, negative sizes, a price
// list that does not start at 0, a state outside [0, n_units].
Status validate_fluid_split(const FluidSplitConfig& c);
// The pool's blocks with n_demoted units streamed.
int64_t fluid_kv_blocks(const FluidSplitConfig& c, int64_t n_demoted);
// The price list of a split between host memory and the disk (a weight
// store's resident layers and its ring, --mem-budget): with S layers streamed,
// a decode step takes max(compute_s, S x transfer_s) (the ring hides reads
// under compute until they outlast it), so entry k is
//   max(compute_s, (S + k) x transfer_s) - max(compute_s, S x transfer_s),
// k = 0 .. max_units. Errors: a negative time or count.
StatusOr<std::vector<double>> ring_demotion_costs(double compute_s, double transfer_s, int64_t n_streamed,
                                                  int64_t max_units);
// One step of the policy above. c must pass validate_fluid_split.
StatusOr<FluidDecision> decide_fluid_split(const FluidSplitConfig& c, const FluidSplitState& s, const FluidLoad& load);

}  // namespace sluice::plan
