// Vector helpers of paged attention, one set per instruction-set level. The
// AVX2/AVX-512 versions live in paged_attention_{avx2,avx512}.cpp (compiled for
// that level only) and are called only when active_isa() allows.
#pragma once

#include <cstdint>

namespace sluice::cpu {

struct PagedVecOps {
  // s[j] = scale * sum_i q[i] k[j][i]            k: [n, hd] rows, s: [n]
  void (*scores)(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s);
  // acc[i] = acc[i] * r + sum_j p[j] v[j][i]      v: [n, hd] rows
  void (*accumulate)(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd);
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
};

PagedVecOps paged_vec_ops_avx2();
PagedVecOps paged_vec_ops_avx512();

}  // namespace sluice::cpu
