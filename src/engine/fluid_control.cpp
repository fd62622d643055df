#include "engine/fluid_control.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/model.h"
#include "plan/expert_plan.h"
#include "weights/placement.h"

namespace sluice {

namespace {

// The pool's sizes a finished config implies: with every unit kept, with
// every unit given up, and with every unit the price list covers given up.
Status finish_setup(FluidSetup& f) {
  const plan::FluidSplitConfig& c = f.config;
  RETURN_IF_ERROR(plan::validate_fluid_split(c));
  f.n_blocks_start = plan::fluid_kv_blocks(c, 0);
  f.n_blocks_max = plan::fluid_kv_blocks(c, c.n_units);
  f.n_blocks_reachable =
      plan::fluid_kv_blocks(c, std::min<int64_t>(c.n_units, static_cast<int64_t>(c.demote_cost_s.size()) - 1));
  return Status();
}

// The split of a routed model's expert slots: a unit is one routed layer's
// worth (slots.min, the fewest kept). On the host (no tiers) the slots are
// the store's expert pool, the budget the store's buffers and the pool, priced
// by the placement's step at the hit rate the smaller pool would get; on a
// device they are its slots of experts copied in, the budget those that can
// move and the pool, priced by the tier planner's decode step with that many
// fewer experts in HBM.
StatusOr<FluidSetup> plan_slot_split(const weights::PlacementPlan& store, const plan::TierInputs* tiers,
                                     const LayerWeightSource::ExpertSlotRange& slots, int64_t n_pool_blocks,
                                     int64_t block_bytes, int64_t promote_hold_steps) {
  FluidSetup f;
  f.slots_per_unit = slots.min;
  f.base_slots = slots.now;
  const int64_t n_units = (slots.now - slots.min) / slots.min;
  if (n_units < 1)
    return invalid_argument("--fluid-split: {} {} slots, no more than the {} one routed layer needs; nothing can "
                            "move (raise {})",
                            tiers ? "the device keeps expert" : "the expert pool holds", slots.now, slots.min,
                            tiers ? "--gpu-budget" : "--mem-budget");
  plan::FluidSplitConfig& c = f.config;
  c.unit_bytes = static_cast<double>(f.slots_per_unit) * static_cast<double>(slots.slot_bytes);
  c.n_units = n_units;
  const double moving = static_cast<double>(n_units) * c.unit_bytes;
  c.floor_bytes = tiers ? 0.0 : static_cast<double>(store.host_bytes) - moving;
  c.kv_block_bytes = static_cast<double>(block_bytes);
  c.budget_bytes = c.floor_bytes + moving + static_cast<double>(n_pool_blocks) * c.kv_block_bytes;
  c.promote_hold_steps = promote_hold_steps;
  if (tiers) {
    ASSIGN_OR_RETURN(const std::vector<double> per_expert, plan::demotion_costs(*tiers, n_units * f.slots_per_unit));
    for (int64_t k = 0; k <= n_units; ++k) {
      const auto at = static_cast<size_t>(k * f.slots_per_unit);
      if (at >= per_expert.size()) break;  // below the smallest budget the planner streams with
      c.demote_cost_s.push_back(per_expert[at]);
    }
  } else {
    const double distinct =
        store.n_layer_moe > 0 ? store.experts_per_step / static_cast<double>(store.n_layer_moe) : 0;
    const double gbps = store.disk_gbps > 0 ? store.disk_gbps : 1.0;
    auto step = [&](int64_t n) {
      return store.predicted_step_s_given(plan::expected_hit_rate(n, store.n_layer_moe, store.n_share(), distinct),
                                          gbps);
    };
    for (int64_t k = 0; k <= n_units; ++k)
      c.demote_cost_s.push_back(step(slots.now - k * f.slots_per_unit) - step(slots.now));
  }
  RETURN_IF_ERROR(finish_setup(f));
  return f;
}

}  // namespace

StatusOr<FluidSetup> plan_fluid_split(const Model& model, const weights::PlacementPlan& store,
                                      const plan::TierInputs* device_tiers, int64_t n_pool_blocks, int64_t block_bytes,
                                      int64_t promote_hold_steps) {
  const bool on_device = !model.backend().host_visible();
  if (on_device && !device_tiers)
    return invalid_argument("--fluid-split on the {} backend moves device-tier layers or expert slots: it needs "
                            "--gpu-budget (three tiers)",
                            model.backend().name());
  // A routed model: the units are groups of expert slots (its pool, or the device's).
  const LayerWeightSource::ExpertSlotRange slots = model.expert_slot_range();
  if (slots.max > 0)
    return plan_slot_split(store, on_device ? device_tiers : nullptr, slots, n_pool_blocks, block_bytes,
                           promote_hold_steps);
  // On the host a demoted layer streams through the ring; on a device it may
  // also go to host memory of its own.
  if (!on_device && store.n_ring_slots < 1)
    return invalid_argument("--fluid-split moves layers between host memory and the weight store's ring, and "
                            "nothing streams under this --mem-budget (no ring); lower --mem-budget or drop "
                            "--fluid-split");
  FluidSetup f;
  uint64_t unit = 0, moved = 0;
  for (int64_t l = model.hparams().n_layer - 1; l >= 0; --l) {
    const uint64_t b = model.demotable_bytes(l);
    if (b == 0) continue;
    f.units.push_back(l);
    unit = std::max(unit, b);
    moved += b;
  }
  if (f.units.empty())
    return invalid_argument("--fluid-split: no layer can move between {} and the ring (every layer streams "
                            "already, or the model is routed)",
                            on_device ? "the device tier" : "host memory");
  plan::FluidSplitConfig& c = f.config;
  // On the host the store's other buffers (essentials, the ring) are the
  // floor; on a device the budget is the device tier's arenas and the pool alone.
  c.floor_bytes = on_device ? 0.0 : static_cast<double>(store.host_bytes - std::min(store.host_bytes, moved));
  c.unit_bytes = static_cast<double>(unit);
  c.n_units = static_cast<int64_t>(f.units.size());
  c.kv_block_bytes = static_cast<double>(block_bytes);
  c.budget_bytes = c.floor_bytes + static_cast<double>(c.n_units) * c.unit_bytes +
                   static_cast<double>(n_pool_blocks) * c.kv_block_bytes;
  c.promote_hold_steps = promote_hold_steps;
  if (on_device) {
    ASSIGN_OR_RETURN(c.demote_cost_s, plan::demotion_costs(*device_tiers, c.n_units));
  } else {
    ASSIGN_OR_RETURN(c.demote_cost_s,
                     plan::ring_demotion_costs(store.predicted_compute_s, store.transfer_s, store.n_streamed, c.n_units));
  }
  RETURN_IF_ERROR(finish_setup(f));
  return f;
}

FluidControl::FluidControl(FluidSetup setup, Model& model, KvStore& kv)
    : setup_(std::move(setup)), model_(model), kv_(kv) {}

std::string FluidControl::describe() const {
  const plan::FluidSplitConfig& c = setup_.config;
  const std::string units = setup_.slots_per_unit > 0
                                ? fmt::format("{} groups of {} expert slots", c.n_units, setup_.slots_per_unit)
                                : fmt::format("{} movable layers", c.n_units);
  return fmt::format("fluid split: {:.1f} MiB of {} shared by {} of {:.1f} MiB and the KV pool ({} "
                     "blocks of {:.1f} KiB with every unit resident, up to {} with all given up); the first unit "
                     "given up costs {:.3f} ms a step",
                     (c.budget_bytes - c.floor_bytes) / (1 << 20), model_.backend().host_visible() ? "host memory" : "device memory",
                     units, c.unit_bytes / (1 << 20),
                     setup_.n_blocks_start, c.kv_block_bytes / 1024, setup_.n_blocks_max,
                     c.demote_cost_s.size() > 1 ? c.demote_cost_s[1] * 1e3 : 0.0);
}

Status FluidControl::move_unit(int64_t u, bool demote) {
  if (setup_.slots_per_unit > 0)  // the expert pool: unit u is the u-th group of slots from its end
    return model_.set_expert_slots(setup_.base_slots - (demote ? u + 1 : u) * setup_.slots_per_unit);
  const int64_t layer = setup_.units[static_cast<size_t>(u)];
  return demote ? model_.demote_layer(layer) : model_.promote_layer(layer);
}

Status FluidControl::finish_promotion(Scheduler& sched) {
  if (!sched.blocks().pool().drained()) return Status();
  RETURN_IF_ERROR(model_.backend().resize_kv(kv_, pending_));
  RETURN_IF_ERROR(move_unit(state_.n_demoted - 1, /*demote=*/false));
  --state_.n_demoted;
  state_.calm_steps = 0;
  ++n_promotions_;
  pending_ = -1;
  return Status();
}

Status FluidControl::before_step(Scheduler& sched, const FluidCosts& costs) {
  const BlockDemand d = sched.block_demand();
  const BlockPool& pool = sched.blocks().pool();
  if (pending_ >= 0) {
    // The smaller pool is already in force: a shortage in it calls the promotion off.
    if (d.running_need + d.waiting_need > pool.n_available()) {
      sched.set_block_limit(plan::fluid_kv_blocks(setup_.config, state_.n_demoted));
      pending_ = -1;
      reason_ = "a promotion was called off: the pool's blocks are needed again";
    } else {
      return finish_promotion(sched);
    }
  }
  // The steady state: every unit kept and nothing short. The policy would
  // keep them too; asking it would only format its reason every step.
  if (state_.n_demoted == 0 && d.running_need + d.waiting_need <= pool.n_available()) return Status();
  const plan::FluidLoad load{.n_blocks_used = pool.n_used(),
                             .n_blocks_running_need = d.running_need,
                             .n_blocks_waiting_need = d.waiting_need,
                             .preempt_cost_s = costs.preempt_cost_s,
                             .wait_cost_s = costs.wait_cost_s,
                             .horizon_steps = std::max(1.0, costs.horizon_steps)};
  ASSIGN_OR_RETURN(const plan::FluidDecision dec, plan::decide_fluid_split(setup_.config, state_, load));
  reason_ = dec.reason;
  if (dec.action == plan::FluidAction::kDemote) {
    for (int64_t u = state_.n_demoted; u < dec.next.n_demoted; ++u) {
      RETURN_IF_ERROR(move_unit(u, /*demote=*/true));
      ++state_.n_demoted;  // the pool grows only by what was freed
      ++n_demotions_;
    }
    state_.calm_steps = 0;
    const int64_t limit = plan::fluid_kv_blocks(setup_.config, state_.n_demoted);
    RETURN_IF_ERROR(model_.backend().resize_kv(kv_, limit));  // into the memory the layers gave up
    sched.set_block_limit(limit);
    return Status();
  }
  if (dec.action == plan::FluidAction::kPromote) {
    const int64_t limit = dec.n_kv_blocks;
    if (limit < d.largest_seq) {  // a sequence could no longer fit the pool alone
      state_.calm_steps = dec.next.calm_steps;
      reason_ = fmt::format("promotion held: the pool would shrink to {} blocks, below the {} one sequence can need",
                            limit, d.largest_seq);
      return Status();
    }
    sched.set_block_limit(limit);
    pending_ = limit;
    return finish_promotion(sched);
  }
  state_ = dec.next;
  return Status();
}

}  // namespace sluice
