#include "plan/fluid_split.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sluice::plan {

Status validate_fluid_split(const FluidSplitConfig& c) {
  if (!(c.unit_bytes > 0) || !(c.kv_block_bytes > 0))
    return invalid_argument("the fluid split needs positive unit and KV block sizes");
  if (c.n_units < 0 || c.floor_bytes < 0 || c.promote_hold_steps < 1 || c.promote_reserve_blocks < 0)
    return invalid_argument("the fluid split needs non-negative counts and a hold of at least one step");
  if (c.budget_bytes < c.floor_bytes)
    return resource_exhausted("the GPU budget {:.0f} bytes is below the weights that never move ({:.0f} bytes)",
                              c.budget_bytes, c.floor_bytes);
  if (c.demote_cost_s.empty() || c.demote_cost_s[0] != 0)
    return invalid_argument("the demotion price list starts with 0 (no unit demoted)");
  return Status::ok_status();
}

namespace {

double resident_bytes(const FluidSplitConfig& c, int64_t n_demoted) {
  return c.floor_bytes + static_cast<double>(c.n_units - n_demoted) * c.unit_bytes;
}

FluidDecision decision(const FluidSplitConfig& c, FluidAction a, FluidSplitState next, std::string reason) {
  return {.action = a, .next = next, .n_kv_blocks = fluid_kv_blocks(c, next.n_demoted),
          .weight_bytes = resident_bytes(c, next.n_demoted), .reason = std::move(reason)};
}

}  // namespace

StatusOr<std::vector<double>> ring_demotion_costs(double compute_s, double transfer_s, int64_t n_streamed,
                                                  int64_t max_units) {
  if (!(compute_s >= 0) || !(transfer_s >= 0) || n_streamed < 0 || max_units < 0)
    return invalid_argument("ring demotion costs: compute {} s, transfer {} s, {} streamed, {} units", compute_s,
                            transfer_s, n_streamed, max_units);
  auto step = [&](int64_t s) { return std::max(compute_s, static_cast<double>(s) * transfer_s); };
  std::vector<double> costs;
  for (int64_t k = 0; k <= max_units; ++k) costs.push_back(step(n_streamed + k) - step(n_streamed));
  return costs;
}

int64_t fluid_kv_blocks(const FluidSplitConfig& c, int64_t n_demoted) {
  const double left = c.budget_bytes - resident_bytes(c, n_demoted);
  return left > 0 ? static_cast<int64_t>(std::floor(left / c.kv_block_bytes)) : 0;
}

StatusOr<FluidDecision> decide_fluid_split(const FluidSplitConfig& c, const FluidSplitState& s, const FluidLoad& load) {
  RETURN_IF_ERROR(validate_fluid_split(c));
  if (s.n_demoted < 0 || s.n_demoted > c.n_units || resident_bytes(c, s.n_demoted) > c.budget_bytes)
    return invalid_argument("fluid split state: {} of {} units demoted does not fit the budget", s.n_demoted, c.n_units);
  if (load.n_blocks_used < 0 || load.n_blocks_running_need < 0 || load.n_blocks_waiting_need < 0 ||
      load.horizon_steps < 0)
    return invalid_argument("fluid split load: block counts and the horizon must not be negative");
  const int64_t n_blocks = fluid_kv_blocks(c, s.n_demoted);
  const int64_t n_free = std::max<int64_t>(0, n_blocks - load.n_blocks_used);

  // A shortage: the running sequences' (else preemption) or the first waiting request's (else it waits).
  int64_t n_short = std::max<int64_t>(0, load.n_blocks_running_need - n_free);
  double avoided_s = load.preempt_cost_s;
  const char* alternative = "preempting running sequences";
  if (n_short == 0 && load.n_blocks_waiting_need > 0) {
    n_short = std::max<int64_t>(0, load.n_blocks_running_need + load.n_blocks_waiting_need - n_free);
    avoided_s = load.wait_cost_s;
    alternative = "leaving a request waiting";
  }

  if (n_short > 0) {
    FluidSplitState next{.n_demoted = s.n_demoted, .calm_steps = 0};
    const int64_t most = std::min<int64_t>(c.n_units, static_cast<int64_t>(c.demote_cost_s.size()) - 1);
    int64_t k = 1;
    while (s.n_demoted + k <= most && fluid_kv_blocks(c, s.n_demoted + k) - n_blocks < n_short) ++k;
    if (s.n_demoted + k > most) {
      return decision(c, FluidAction::kKeep, next,
                      fmt::format("{} blocks short; demoting every unit the planner prices ({}) cannot cover it: {}",
                                  n_short, most, alternative));
    }
    const double cost_s =
        (c.demote_cost_s[static_cast<size_t>(s.n_demoted + k)] - c.demote_cost_s[static_cast<size_t>(s.n_demoted)]) *
        load.horizon_steps;
    if (cost_s < avoided_s) {
      next.n_demoted += k;
      return decision(c, FluidAction::kDemote, next,
                      fmt::format("{} blocks short: streaming {} more unit(s) costs {:.4g} s over {:.4g} steps, "
                                  "less than {:.4g} s for {}",
                                  n_short, k, cost_s, load.horizon_steps, avoided_s, alternative));
    }
    return decision(c, FluidAction::kKeep, next,
                    fmt::format("{} blocks short: streaming {} more unit(s) would cost {:.4g} s, not less than "
                                "{:.4g} s for {}",
                                n_short, k, cost_s, avoided_s, alternative));
  }

  // Calm: count it; promote one unit once calm long enough and the smaller pool still holds the load.
  FluidSplitState next{.n_demoted = s.n_demoted, .calm_steps = s.calm_steps + 1};
  if (s.n_demoted == 0) return decision(c, FluidAction::kKeep, next, "every unit resident");
  const int64_t n_after = fluid_kv_blocks(c, s.n_demoted - 1);
  const int64_t n_hold = load.n_blocks_used + load.n_blocks_running_need + c.promote_reserve_blocks;
  if (n_after < n_hold) {
    next.calm_steps = 0;  // the blocks are still needed: the calm does not count
    return decision(c, FluidAction::kKeep, next,
                    fmt::format("promoting would leave {} blocks for {} held and reserved", n_after, n_hold));
  }
  if (next.calm_steps < c.promote_hold_steps) {
    return decision(c, FluidAction::kKeep, next,
                    fmt::format("calm for {} of {} steps before a promotion", next.calm_steps, c.promote_hold_steps));
  }
  next.n_demoted -= 1;
  next.calm_steps = 0;
  return decision(c, FluidAction::kPromote, next,
                  fmt::format("calm for {} steps: one unit back in HBM, the pool {} -> {} blocks", c.promote_hold_steps,
                              n_blocks, n_after));
}

}  // namespace sluice::plan
