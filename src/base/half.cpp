#include "base/half.h"

namespace sluice {

// half_avx2.cpp (compiled with -mf16c; called only when the CPU has it).
int64_t f32_to_f16_array_f16c(const float* src, uint16_t* dst, int64_t n);

void f32_to_f16_array(const float* src, uint16_t* dst, int64_t n) {
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  int64_t i = f16c ? f32_to_f16_array_f16c(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace sluice
