// Paged-attention vector helpers for avx2 (this file is compiled for avx2). The
// fused tile() is the composed arithmetic read in place (f16 widened in registers).
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

// Rows j = 0, 1, ... of floats (T = float) or f16 bits (T = uint16_t), `stride`
// bytes apart. f16 is widened in registers, exactly, so a value computes the same
// bits whichever way it is stored.
template <typename T>
struct Rows {
  const uint8_t* base;
  int64_t stride;
  const T* row(int64_t j) const { return reinterpret_cast<const T*>(base + j * stride); }
  __m256 load8(int64_t j, int64_t i) const {
    if constexpr (sizeof(T) == 4) return _mm256_loadu_ps(row(j) + i);
    else return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row(j) + i)));
  }
  float at(int64_t j, int64_t i) const {
    if constexpr (sizeof(T) == 4) return row(j)[i];
    else return _cvtsh_ss(row(j)[i]);
  }
};

Rows<float> float_rows(const float* v, int64_t hd) {
  return Rows<float>{reinterpret_cast<const uint8_t*>(v), hd * static_cast<int64_t>(sizeof(float))};
}

// q . row j: 8 lanes in element order, hsum, then the scalar tail.
template <typename T>
float dot(const float* a, const Rows<T>& b, int64_t j, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b.load8(j, i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b.at(j, i);
  return s;
}

// The dot products of q with rows j .. j+3 at once: each row's sum is the chain
// of dot(), interleaved so the 4 FMA chains overlap instead of waiting on each
// other's latency.
template <typename T>
void dot4(const float* a, const Rows<T>& b, int64_t j, int64_t n, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i);
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(av, b.load8(j + r, i), acc[r]);
  }
  for (int r = 0; r < 4; ++r) {
    float s = hsum(acc[r]);
    for (int64_t k = i; k < n; ++k) s += a[k] * b.at(j + r, k);
    out[r] = s;
  }
}

template <typename T>
void scores_rows(const float* q, const Rows<T>& k, int64_t n, int64_t hd, float scale, float* s) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    float d[4];
    dot4(q, k, j, hd, d);
    for (int r = 0; r < 4; ++r) s[j + r] = d[r] * scale;
  }
  for (; j < n; ++j) s[j] = dot(q, k, j, hd) * scale;
}

void scores(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s) {
  scores_rows(q, float_rows(k, hd), n, hd, scale, s);
}

// Per element acc[i] * r, then + p[j] v[j][i] for j in order. Up to 8 vectors
// of a row are carried side by side, so the n-long FMA chains of different
// elements overlap.
template <typename T>
void accumulate_rows(float* acc, float r, const float* p, const Rows<T>& v, int64_t n, int64_t hd) {
  const __m256 rv = _mm256_set1_ps(r);
  int64_t i = 0;
  for (; i + 64 <= hd; i += 64) {
    __m256 a[8];
    for (int c = 0; c < 8; ++c) a[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + i + 8 * c), rv);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(pj, v.load8(j, i + 8 * c), a[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + i + 8 * c, a[c]);
  }
  for (; i + 8 <= hd; i += 8) {
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + i), rv);
    for (int64_t j = 0; j < n; ++j) a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), v.load8(j, i), a);
    _mm256_storeu_ps(acc + i, a);
  }
  for (; i < hd; ++i) {
    float a = acc[i] * r;
    for (int64_t j = 0; j < n; ++j) a += p[j] * v.at(j, i);
    acc[i] = a;
  }
}

void accumulate(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd) {
  accumulate_rows(acc, r, p, float_rows(v, hd), n, hd);
}

// The composed arithmetic (scores, softmax_step, accumulate) on K/V rows where
// they lie: the same bits as converting the tile to floats first, without the
// copy (which was most of the attention time of a 16-sequence decode step).
template <typename T>
void tile_rows(const float* q, const Rows<T>& k, const Rows<T>& v, int64_t n, int64_t hd, float scale, float* x) {
  float sc[kPagedTileMax] = {}, pr[kPagedTileMax];  // (zeroed: GCC cannot see scores_rows fill [0, n))
  scores_rows(q, k, n, hd, scale, sc);
  const float r = softmax_step(x, sc, pr, n);
  accumulate_rows(x + 2, r, pr, v, n, hd);
}

void tile(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, bool f16, int64_t n, int64_t hd,
          float scale, float* x) {
  if (f16) tile_rows(q, Rows<uint16_t>{k, stride}, Rows<uint16_t>{v, stride}, n, hd, scale, x);
  else tile_rows(q, Rows<float>{k, stride}, Rows<float>{v, stride}, n, hd, scale, x);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

PagedVecOps paged_vec_ops_avx2() { return PagedVecOps{scores, accumulate, f16_to_f32, tile}; }

}  // namespace sluice::cpu
