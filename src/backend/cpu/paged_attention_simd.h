// Vector helpers of paged attention, one set per instruction-set level. The
// AVX2/AVX-512 versions live in paged_attention_{avx2,avx512}.cpp (compiled for
// that level only) and are called only when active_isa() allows.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice::cpu {

// Most positions one tile() call advances a query over.
constexpr int64_t kPagedTileMax = 16;

struct PagedVecOps {
  // s[j] = scale * sum_i q[i] k[j][i]            k: [n, hd] rows, s: [n]
  void (*scores)(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s);
  // acc[i] = acc[i] * r + sum_j p[j] v[j][i]      v: [n, hd] rows
  void (*accumulate)(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd);
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  // One query head's online-softmax state x = [m, l, acc[hd]] advanced over
  // n <= kPagedTileMax positions whose K rows are at k + j * stride bytes (V rows
  // at v + j * stride), f16 values when `f16`, else f32. Reads K/V where they
  // lie (no converted copy); the arithmetic does not depend on the element type,
  // so f16 rows and the same values as f32 rows give the same bits. Null where a
  // level has no fused kernel: the caller then composes scores/accumulate.
  void (*tile)(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, bool f16, int64_t n, int64_t hd,
               float scale, float* x);
};

// The online-softmax step of a tile given its n scores sc (composed paths):
// m' = max(m, max_j sc[j]), pr[j] = e^(sc[j] - m'), l' = l r + sum_j pr[j];
// returns r = e^(m - m') (1 if m does not change, 0 from the empty state), by
// which the caller scales acc before adding sum_j pr[j] v[j].
//   x: [m, l, ...]   sc, pr: [n]
inline float softmax_step(float* x, const float* sc, float* pr, int64_t n) {
  float mb = sc[0];
  for (int64_t j = 1; j < n; ++j) mb = mb < sc[j] ? sc[j] : mb;
  float r = 1.0f;
  if (mb > x[0]) {
    r = x[0] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(x[0] - mb);
    x[0] = mb;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += (pr[j] = std::exp(sc[j] - x[0]));
  x[1] = x[1] * r + sum;
  return r;
}

PagedVecOps paged_vec_ops_avx2();
PagedVecOps paged_vec_ops_avx512();

}  // namespace sluice::cpu
