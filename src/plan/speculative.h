// Speculative decoding arithmetic: expected speedup from the acceptance rate,
// the draft length and the draft/target cost ratio, and the best draft length.
//
// One speculative round drafts k tokens (cost k x r target passes, r = draft
// time / target time) and verifies them in one target pass, which emits the
// accepted prefix plus one token of its own:
//   speedup = tokens per round / (1 + k r)
// Two acceptance models, because the essays use both:
//   geometric  each draft token survives with probability a, and the first
//              rejection ends the round (Leviathan et al.):
//              tokens = (1 - a^(k+1)) / (1 - a)
//   linear     a is the fraction of the k drafts accepted on average (essay 003's
//              worked example: k=5, a=0.7 -> 3.5 accepted): tokens = k a + 1
// The linear model grows with k without bound, so only the geometric one has a
// best draft length. Pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/status.h"

namespace sluice::plan {

enum class AcceptanceModel { kGeometric, kLinear };
const char* acceptance_model_name(AcceptanceModel m);

struct SpecInputs {
  double acceptance = 0;   // a in [0, 1]
  int64_t draft_len = 0;   // k >= 1
  double cost_ratio = 0;   // r >= 0
  AcceptanceModel model = AcceptanceModel::kGeometric;
};

struct SpecEstimate {
  int64_t draft_len = 0;
  double expected_accepted = 0;  // draft tokens accepted per round
  double tokens_per_round = 0;   // accepted + the target's own token
  double cost_target_passes = 0; // 1 + k r
  double speedup = 0;            // tokens_per_round / cost_target_passes
};

// Errors: acceptance outside [0, 1], k < 1, negative cost ratio.
StatusOr<SpecEstimate> spec_estimate(const SpecInputs& in);

struct BestDraft {
  SpecEstimate best;
  std::vector<SpecEstimate> curve;  // k = 1 .. max_k
};
// The draft length in 1..max_k with the highest speedup (geometric model).
StatusOr<BestDraft> best_draft_length(double acceptance, double cost_ratio, int64_t max_k);

}  // namespace sluice::plan
