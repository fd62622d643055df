// DraftLength: picks each sequence's draft length from its acceptance so far.
//
// Acceptance is modelled as in the planner (plan/speculative.h, geometric): each
// draft survives with probability a, the first rejection ends the round. A round
// that drafted k and accepted m gives m survivals and, if m < k, one failure; a
// is estimated from exponentially decayed counts of both (with a prior), so it
// follows a sequence whose text turns more or less predictable:
//
//   a = (prior_accepted + sum decay^age x accepted) /
//       (prior_accepted + prior_rejected + sum decay^age x (accepted + rejected))
//
// The prior is the engine's running acceptance over all sequences (a new
// sequence starts from what the proposer has achieved so far, not from scratch).
// The next length is the planner's best length (plan::spec_estimate over
// k = 1 .. max_k, as best_draft_length does) for the
// measured cost ratio r (draft and verification time per draft token / target
// step time). When even the best length is expected to be slower than plain
// decoding, the sequence drafts nothing, but probes one token after probe_every
// idle rounds, doubling the wait after each probe that does not change the
// verdict (up to max_probe_every).
// Plain data, one per sequence.
#pragma once

#include <cstdint>

namespace sluice::spec {

struct DraftLengthConfig {
  int32_t max_k = 8;              // longest draft
  bool adaptive = true;           // false: always max_k
  double decay = 0.9;             // weight of a round's counts after each later round
  double prior_acceptance = 2.0 / 3.0;  // a before any observation
  double prior_weight = 3.0;            // in rounds: how fast observations override the prior
  int32_t probe_every = 8;              // rounds without drafting before the first probe
  int32_t max_probe_every = 128;
};

class DraftLength {
 public:
  explicit DraftLength(const DraftLengthConfig& config = {}) : config_(config) {}

  // The draft length for the next round (0 .. max_k) at cost ratio r >= 0.
  int32_t next(double cost_ratio);
  // Records a verified round: k drafted, m of them accepted (0 <= m <= k).
  void observe(int32_t k, int32_t m);
  // The current estimate of a.
  double acceptance() const;

 private:
  DraftLengthConfig config_;
  double accepted_ = 0;  // decayed survivals
  double rejected_ = 0;  // decayed failures
  int32_t idle_rounds_ = 0;
  int32_t probe_wait_ = 0;  // idle rounds before the next probe (0: probe_every)
};

// Online estimate of the target's step time as a + b x tokens (least squares
// over exponentially decayed samples), so that verification's extra cost per
// draft token is measured, not assumed.
class StepCost {
 public:
  explicit StepCost(double decay = 0.98) : decay_(decay) {}
  void observe(double n_tokens, double seconds);
  // Seconds per extra token (b >= 0; 0 until the samples spread in size).
  double per_token() const;
  // Predicted seconds for n tokens (the mean step time until b is known).
  double seconds(double n_tokens) const;

 private:
  double decay_;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

}  // namespace sluice::spec
