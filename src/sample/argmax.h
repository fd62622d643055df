// The greedy pick: the lowest index of the largest logit.
//
//   argmax_logits(x, n) = min { i : x[i] = max_j x[j] }, over the non-NaN x[j]
//
// NaN counts as -inf, and an array with nothing above -inf gives 0, so the
// result is exactly what the scalar scan `if (x[i] > best)` from best = -inf
// returns. That scan is argmax_logits_scalar, the reference; argmax_logits uses
// AVX2 where the CPU has it (two passes: the maximum, then its first index).
#pragma once

#include <cstdint>

namespace sluice {

// x: [n], n >= 0.
int32_t argmax_logits(const float* x, int32_t n);
int32_t argmax_logits_scalar(const float* x, int32_t n);

}  // namespace sluice
