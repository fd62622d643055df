// The engine's side of the fluid split (engine/fluid_control.h): its setup
// at create(), what a shortage would cost otherwise each step, and the step
// itself under the placement's lock.
#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "engine/engine_impl.h"

namespace sluice {

StatusOr<std::optional<FluidSetup>> Engine::Impl::plan_fluid(const plan::TierInputs* tiers, int64_t n_blocks,
                                                             int64_t block_bytes) {
  if (!cfg.fluid_split) return std::optional<FluidSetup>();
  if (!stream)
    return invalid_argument("--fluid-split shares a budget between resident layers and the KV pool; it needs "
                            "--mem-budget (host memory), or --gpu-budget on a device backend");
  if (cfg.parallel) return unimplemented("--fluid-split is not supported across processes (--parallel)");
  ASSIGN_OR_RETURN(FluidSetup fs,
                   plan_fluid_split(*model, stream->store().plan(), tiers, n_blocks, block_bytes, cfg.fluid_hold_steps));
  return std::optional<FluidSetup>(std::move(fs));
}

void Engine::Impl::start_fluid(FluidSetup setup) {
  sched->set_admission_blocks(setup.n_blocks_reachable);
  fluid = std::make_unique<FluidControl>(std::move(setup), *model, kv);
  placement += (placement.empty() || placement.back() == '\n' ? "" : "\n") + fluid->describe() + "\n";
}

FluidCosts Engine::Impl::fluid_costs() const {
  // A decode step at the running batch, and a token recomputed, from the
  // steps seen so far.
  const auto n_running = static_cast<double>(std::max<int64_t>(1, sched->n_running()));
  const double step_s = step_cost.seconds(n_running);
  const double per_token_s = step_cost.per_token() > 0 ? step_cost.per_token() : step_s / n_running;
  FluidCosts c;
  double remaining_sum = 0, remaining_min = -1;
  for (SeqId id : sched->running()) {
    const Sequence* s = sched->find(id);
    const auto left = static_cast<double>(std::max<int64_t>(1, s->stop.max_tokens - s->n_generated()));
    remaining_sum += left;
    remaining_min = remaining_min < 0 ? left : std::min(remaining_min, left);
  }
  if (!sched->running().empty()) {
    const Sequence* victim = sched->find(sched->running().back());
    c.preempt_cost_s = static_cast<double>(victim->n_computed) * per_token_s + step_s;
    c.wait_cost_s = remaining_min * step_s;
    c.horizon_steps = remaining_sum / static_cast<double>(sched->running().size());
  }
  // The only sequence preempting itself, or a request waiting with nothing
  // running, would wait for blocks no one frees.
  constexpr double kForever = std::numeric_limits<double>::infinity();
  if (sched->n_running() == 1) c.preempt_cost_s = kForever;
  if (sched->n_running() == 0 && (sched->n_waiting() > 0 || sched->n_swapped() > 0)) c.wait_cost_s = kForever;
  return c;
}

void Engine::Impl::fluid_step(const FluidCosts& costs) {
  std::lock_guard<std::mutex> lock(placement_mu);
  if (const Status st = fluid->before_step(*sched, costs); !st.ok()) {
    fmt::print(stderr, "[sluice] fluid split stopped: {}\n", st.message());
    fluid.reset();
  }
}

}  // namespace sluice
