// Paged-attention vector helpers for avx2 (this file is compiled for avx2).
#include <immintrin.h>

#include "backend/cpu/paged_attention_simd.h"

namespace sluice::cpu {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The dot products of q with 4 rows at once: each row's sum is the chain of
// dot() (8 lanes in element order, hsum, then the scalar tail), interleaved so
// the 4 FMA chains overlap instead of waiting on each other's latency.
float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void dot4(const float* a, const float* b, int64_t n, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i);
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + r * n + i), acc[r]);
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum(acc[r]);
    for (int64_t k = i; k < n; ++k) s += a[k] * b[r * n + k];
    out[r] = s;
  }
}

void scores(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    float d[4];
    dot4(q, k + j * hd, hd, d);
    for (int r = 0; r < 4; ++r) s[j + r] = d[r] * scale;
  }
  for (; j < n; ++j) s[j] = dot(q, k + j * hd, hd) * scale;
}

// Per element acc[i] * r, then + p[j] v[j][i] for j in order. Up to 8 vectors
// of a row are carried side by side, so the n-long FMA chains of different
// elements overlap.
void accumulate(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd) {
  const __m256 rv = _mm256_set1_ps(r);
  int64_t i = 0;
  for (; i + 64 <= hd; i += 64) {
    __m256 a[8];
    for (int c = 0; c < 8; ++c) a[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8 * c), rv);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + j * hd + i + 8 * c), a[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + i + 8 * c, a[c]);
  }
  for (; i + 8 <= hd; i += 8) {
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + i), rv);
    for (int64_t j = 0; j < n; ++j) a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(v + j * hd + i), a);
    _mm256_storeu_ps(acc + i, a);
  }
  for (; i < hd; ++i) {
    float a = acc[i] * r;
    for (int64_t j = 0; j < n; ++j) a += p[j] * v[j * hd + i];
    acc[i] = a;
  }
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

PagedVecOps paged_vec_ops_avx2() { return PagedVecOps{scores, accumulate, f16_to_f32, nullptr}; }

}  // namespace sluice::cpu
