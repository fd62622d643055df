#include "sample/argmax.h"

#include <limits>

namespace sluice {

// argmax_avx2.cpp (compiled with -mavx2; called only when the CPU has it).
int32_t argmax_logits_avx2(const float* x, int32_t n);

int32_t argmax_logits_scalar(const float* x, int32_t n) {
  float best_value = -std::numeric_limits<float>::infinity();
  int32_t best = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (x[i] > best_value) {  // false for NaN
      best_value = x[i];
      best = i;
    }
  }
  return best;
}

int32_t argmax_logits(const float* x, int32_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 ? argmax_logits_avx2(x, n) : argmax_logits_scalar(x, n);
}

}  // namespace sluice
