#include "spec/draft_length.h"

#include <algorithm>

#include "plan/speculative.h"

namespace sluice::spec {

double DraftLength::acceptance() const {
  // The prior as pseudo-counts: prior_weight rounds' worth of survivals and failures.
  const double a0 = std::clamp(config_.prior_acceptance, 0.01, 0.99);
  const double s0 = config_.prior_weight * a0;
  const double f0 = config_.prior_weight * (1 - a0);
  return (s0 + accepted_) / (s0 + f0 + accepted_ + rejected_);
}

void DraftLength::observe(int32_t k, int32_t m) {
  if (k <= 0) return;
  accepted_ = accepted_ * config_.decay + m;
  rejected_ = rejected_ * config_.decay + (m < k ? 1 : 0);
}

int32_t DraftLength::next(double cost_ratio) {
  if (config_.max_k < 1) return 0;
  if (!config_.adaptive) return config_.max_k;
  const double a = std::clamp(acceptance(), 0.0, 1.0);
  // The planner's best_draft_length, without building its curve (no allocation
  // per sequence per step): the k in 1..max_k with the highest expected speedup.
  double best_speedup = 0;
  int32_t best_k = 1;
  for (int32_t k = 1; k <= config_.max_k; ++k) {
    StatusOr<plan::SpecEstimate> e =
        plan::spec_estimate({.acceptance = a, .draft_len = k, .cost_ratio = std::max(0.0, cost_ratio)});
    if (!e.ok()) return 1;
    if (e->speedup > best_speedup) best_speedup = e->speedup, best_k = k;
  }
  if (best_speedup < 1.0) {
    if (probe_wait_ == 0) probe_wait_ = config_.probe_every;
    if (++idle_rounds_ < probe_wait_) return 0;
    idle_rounds_ = 0;
    probe_wait_ = std::min(config_.max_probe_every, 2 * probe_wait_);
    return 1;
  }
  idle_rounds_ = 0;
  probe_wait_ = 0;
  return best_k;
}

void StepCost::observe(double n_tokens, double seconds) {
  w_ = w_ * decay_ + 1;
  sx_ = sx_ * decay_ + n_tokens;
  sy_ = sy_ * decay_ + seconds;
  sxx_ = sxx_ * decay_ + n_tokens * n_tokens;
  sxy_ = sxy_ * decay_ + n_tokens * seconds;
}

double StepCost::per_token() const {
  if (w_ <= 0) return 0;
  const double var = sxx_ / w_ - (sx_ / w_) * (sx_ / w_);
  const double mean_x = sx_ / w_;
  // Sizes must spread by more than a token or so before a slope means anything.
  if (var < 0.25 + 1e-9 * mean_x * mean_x) return 0;
  const double cov = sxy_ / w_ - mean_x * (sy_ / w_);
  return std::max(0.0, cov / var);
}

double StepCost::seconds(double n_tokens) const {
  if (w_ <= 0) return 0;
  const double b = per_token();
  return std::max(1e-9, sy_ / w_ + b * (n_tokens - sx_ / w_));
}

}  // namespace sluice::spec
