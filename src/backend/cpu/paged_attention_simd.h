// Vector helpers of paged attention, one set per instruction-set level. The
// AVX2/AVX-512 versions live in paged_attention_{avx2,avx512}.cpp (compiled for
// that level only) and are called only when active_isa() allows.
#pragma once

#include <cstdint>

namespace sluice::cpu {

struct PagedVecOps {
  float (*dot)(const float* a, const float* b, int64_t n);         // sum a[i] b[i]
  void (*scale_add)(float* acc, float s, const float* v, int64_t n);  // acc = acc + s v
  void (*scale)(float* acc, float s, int64_t n);                   // acc = acc * s
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
};

PagedVecOps paged_vec_ops_avx2();
PagedVecOps paged_vec_ops_avx512();

}  // namespace sluice::cpu
