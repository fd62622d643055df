#include "base/half.h"

#include <cpuid.h>

namespace sluice {
namespace {

// CPUID leaf 1 (clang has no __builtin_cpu_supports("f16c")): the CPU has AVX
// and F16C, and the OS saves YMM state.
bool cpu_has_f16c() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx || !f16c) return false;
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (eax & 0x6) == 0x6;
}

}  // namespace

// half_avx2.cpp (compiled with -mf16c; called only when the CPU has it).
int64_t f32_to_f16_array_f16c(const float* src, uint16_t* dst, int64_t n);

void f32_to_f16_array(const float* src, uint16_t* dst, int64_t n) {
  static const bool f16c = cpu_has_f16c();
  int64_t i = f16c ? f32_to_f16_array_f16c(src, dst, n) : 0;
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace sluice
