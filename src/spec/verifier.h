// Verifier: exact speculative verification, greedy and sampled.
//
// The target computed logits for the last committed token and the k drafts in
// one pass; row i is the target's next-token logits after drafts d1 .. di:
//
//   rows   0: after the committed tokens -> checks d1
//          1: after d1                   -> checks d2
//          ...
//          k: after dk                   -> the bonus token when all are accepted
//
// For i = 1 .. k, with p = the target sampler's distribution for row i - 1 (its
// penalties see the committed tokens and the drafts accepted so far) and q = the
// distribution di was drawn from (one-hot for deterministic drafts):
//   accept di with probability min(1, p(di) / q(di)), and go on;
//   on rejection emit x ~ normalize(max(0, p - q)) and stop.
// If all k are accepted, emit x ~ p of row k. Each emitted token is a draw from
// the target's own distribution given the tokens before it (Leviathan et al.,
// Chen et al.), so the output distribution equals sampling without drafts, for
// every sampler setting (temperature, top-k, top-p, min-p, penalties): p is
// exactly what Sampler::sample() would draw from.
// Greedy samplers (temperature <= 0): accept di iff it is the target's argmax;
// no RNG draw, so greedy output is token-identical to decoding without drafts.
#pragma once

#include <cstdint>
#include <span>

#include "sample/sampler.h"

namespace sluice::spec {

struct Verdict {
  int32_t n_accepted = 0;  // drafts kept: d1 .. d_n_accepted
  int32_t token = -1;      // then this token of the target's own
};

// sampler: the sequence's target sampler, its history holding the committed
//   tokens; on return it has accept()ed every emitted token.
// target_logits: [draft.size() + 1, n_vocab].
// draft_probs: [draft.size(), n_vocab], row i = the distribution draft[i] was
//   drawn from; null for deterministic drafts.
// scratch: [n_vocab].
Verdict verify(Sampler& sampler, const float* target_logits, std::span<const int32_t> draft,
               const float* draft_probs, float* scratch);

}  // namespace sluice::spec
