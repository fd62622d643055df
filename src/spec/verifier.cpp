#include "spec/verifier.h"

#include <algorithm>

namespace sluice::spec {

Verdict verify(Sampler& sampler, const float* target_logits, std::span<const int32_t> draft,
               const float* draft_probs, float* scratch) {
  const int64_t n_vocab = sampler.n_vocab();
  Verdict v;
  for (size_t i = 0; i < draft.size(); ++i) {
    const float* row = target_logits + static_cast<int64_t>(i) * n_vocab;
    const int32_t d = draft[i];
    if (sampler.is_greedy()) {
      const int32_t best = sampler.sample(row);
      sampler.accept(best);
      if (best != d) {
        v.token = best;
        return v;
      }
      ++v.n_accepted;
      continue;
    }
    sampler.distribution(row, scratch);  // p
    const float* q = draft_probs ? draft_probs + static_cast<int64_t>(i) * n_vocab : nullptr;
    const double p_d = scratch[d];
    const double q_d = q ? q[d] : 1.0;
    // Accept with probability min(1, p/q): u < p / q, as u q < p (q may be 0
    // only through rounding; then any p > 0 accepts).
    if (sampler.uniform() * q_d < p_d) {
      sampler.accept(d);
      ++v.n_accepted;
      continue;
    }
    // Residual max(0, p - q); q one-hot: p without d.
    double total = 0;
    if (q) {
      for (int64_t t = 0; t < n_vocab; ++t) {
        scratch[t] = std::max(0.0f, scratch[t] - q[t]);
        total += scratch[t];
      }
    } else {
      scratch[d] = 0.0f;
      for (int64_t t = 0; t < n_vocab; ++t) total += scratch[t];
    }
    if (!(total > 0)) sampler.distribution(row, scratch);  // p == q up to rounding
    v.token = sampler.sample_from(scratch);
    sampler.accept(v.token);
    return v;
  }
  const float* last = target_logits + static_cast<int64_t>(draft.size()) * n_vocab;
  v.token = sampler.sample(last);
  sampler.accept(v.token);
  return v;
}

}  // namespace sluice::spec
