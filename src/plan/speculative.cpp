#include "plan/speculative.h"

#include <cmath>

namespace sluice::plan {

const char* acceptance_model_name(AcceptanceModel m) {
  return m == AcceptanceModel::kGeometric ? "geometric" : "linear";
}

StatusOr<SpecEstimate> spec_estimate(const SpecInputs& in) {
  if (!(in.acceptance >= 0 && in.acceptance <= 1)) return invalid_argument("acceptance rate {} outside [0, 1]", in.acceptance);
  if (in.draft_len < 1) return invalid_argument("draft length must be at least 1");
  if (!(in.cost_ratio >= 0)) return invalid_argument("draft cost ratio must not be negative");
  const double a = in.acceptance;
  const double k = static_cast<double>(in.draft_len);
  SpecEstimate e;
  e.draft_len = in.draft_len;
  if (in.model == AcceptanceModel::kLinear) {
    e.expected_accepted = k * a;
  } else {
    // a + a^2 + ... + a^k
    e.expected_accepted = a == 1.0 ? k : a * (1.0 - std::pow(a, k)) / (1.0 - a);
  }
  e.tokens_per_round = e.expected_accepted + 1.0;
  e.cost_target_passes = 1.0 + k * in.cost_ratio;
  e.speedup = e.tokens_per_round / e.cost_target_passes;
  return e;
}

StatusOr<BestDraft> best_draft_length(double acceptance, double cost_ratio, int64_t max_k) {
  if (max_k < 1) return invalid_argument("the largest draft length must be at least 1");
  BestDraft b;
  for (int64_t k = 1; k <= max_k; ++k) {
    ASSIGN_OR_RETURN(SpecEstimate e, spec_estimate({.acceptance = acceptance, .draft_len = k, .cost_ratio = cost_ratio}));
    if (b.curve.empty() || e.speedup > b.best.speedup) b.best = e;
    b.curve.push_back(e);
  }
  return b;
}

}  // namespace sluice::plan
