// Paged-attention vector helpers for avx2 (this file is compiled for avx2).
// The fused tile() reads K/V in place (f16 widened in registers) and runs one
// query head's online-softmax step over up to 16 positions:
//   s[j] = scale * q . k[j]        8 rows at a time: 8 FMA chains over hd, one
//                                  transposed sum (hsum8x8) per 8 rows
//   m' = max(m, max_j s[j]);  r = e^(m - m');  p[j] = e^(s[j] - m')   (vector exp)
//   l' = l r + sum_j p[j];    acc = acc r + sum_j p[j] v[j]            (j in order)
// The composed scores/accumulate (used for q8_0 rows and soft-capped scores)
// sum q . k[j] in another order and take std::exp, so the two paths agree to
// rounding, not to the bit.
#include <immintrin.h>

#include <limits>

#include "backend/cpu/paged_attention_simd.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {
namespace {

using avx2::exp_ps;
using avx2::hmax;
using avx2::hsum;

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

// Scores of rows j0 .. j0+7 (rows past n repeat row n - 1; the caller masks
// them): lane j is scale * q . k[j0 + j]. C > 0: hd == 8 C.
template <typename T, int C>
__m256 scores8(const float* q, const Rows<T>& k, int64_t j0, int64_t n, int64_t hd, float scale) {
  const int64_t nc = C > 0 ? C : hd / 8;
  int64_t jr[8];
  for (int64_t j = 0; j < 8; ++j) jr[j] = j0 + j < n ? j0 + j : n - 1;
  __m256 dots[8];
  for (__m256& d : dots) d = _mm256_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const __m256 qc = _mm256_loadu_ps(q + c * 8);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) dots[j] = _mm256_fmadd_ps(qc, k.load8(jr[j], c * 8), dots[j]);
  }
  __m256 s = avx2::hsum8x8(dots);
  if (C == 0 && hd % 8 != 0) {  // the last hd % 8 elements, per row after its 8-lane sum
    alignas(32) float t[8];
    _mm256_store_ps(t, s);
    for (int j = 0; j < 8; ++j)
      for (int64_t i = nc * 8; i < hd; ++i) t[j] += q[i] * k.at(jr[j], i);
    s = _mm256_load_ps(t);
  }
  return _mm256_mul_ps(s, _mm256_set1_ps(scale));
}

// Lanes j < live of v, the others `fill`.
__m256 keep_first(__m256 v, int64_t live, float fill) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(live)), idx));
  return _mm256_blendv_ps(_mm256_set1_ps(fill), v, m);
}

template <typename T, int C>
void tile_t(const float* q, const Rows<T>& k, const Rows<T>& v, int64_t n, int64_t hd, float scale, float* x) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m256 s0 = keep_first(scores8<T, C>(q, k, 0, n, hd, scale), n, kNegInf);
  const __m256 s1 = n > 8 ? keep_first(scores8<T, C>(q, k, 8, n, hd, scale), n - 8, kNegInf) : _mm256_set1_ps(kNegInf);
  const float mb = hmax(_mm256_max_ps(s0, s1));
  float r = 1.0f;
  if (mb > x[0]) {
    r = x[0] == kNegInf ? 0.0f : _mm256_cvtss_f32(exp_ps(_mm256_set1_ps(x[0] - mb)));
    x[0] = mb;
  }
  const __m256 m = _mm256_set1_ps(x[0]);
  const __m256 p0 = exp_ps(_mm256_sub_ps(s0, m)), p1 = exp_ps(_mm256_sub_ps(s1, m));  // e^-inf = 0
  x[1] = x[1] * r + hsum(_mm256_add_ps(p0, p1));
  alignas(32) float pj[kPagedTileMax];
  _mm256_store_ps(pj, p0);
  _mm256_store_ps(pj + 8, p1);
  accumulate_rows(x + 2, r, pj, v, n, hd);
}

template <typename T>
void tile_of(const float* q, const Rows<T>& k, const Rows<T>& v, int64_t n, int64_t hd, float scale, float* x) {
  switch (hd) {
    case 64: return tile_t<T, 8>(q, k, v, n, hd, scale, x);
    case 128: return tile_t<T, 16>(q, k, v, n, hd, scale, x);
    default: return tile_t<T, 0>(q, k, v, n, hd, scale, x);
  }
}

void tile(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, bool f16, int64_t n, int64_t hd,
          float scale, float* x) {
  if (f16) tile_of(q, Rows<uint16_t>{k, stride}, Rows<uint16_t>{v, stride}, n, hd, scale, x);
  else tile_of(q, Rows<float>{k, stride}, Rows<float>{v, stride}, n, hd, scale, x);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

}  // namespace

PagedVecOps paged_vec_ops_avx2() { return PagedVecOps{scores, accumulate, f16_to_f32, tile}; }

}  // namespace sluice::cpu
