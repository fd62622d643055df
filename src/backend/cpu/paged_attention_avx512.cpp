// Paged-attention vector helpers for avx512 (this file is compiled for avx512).
//
// tile(): one query head over up to 16 positions, reading K/V rows where they
// lie in the cache (f16 converted in registers, never copied out):
//
//   s[j] = scale * q . k[j]        16 dot products at once: acc[j] over hd/16
//                                  chunks, then one transpose-and-add tree
//   m' = max(m, max_j s[j]);  r = e^(m - m');  p[j] = e^(s[j] - m')   (vector exp)
//   l' = l r + sum_j p[j];    acc' = acc r + sum_j p[j] v[j]          (j in order)
//
// Rows past n alias row n - 1 in the dot products (their scores are masked),
// so the 16-wide body needs no branches. The arithmetic is the same for f32
// and f16 rows, so a value gives the same bits whichever way it is stored.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "backend/cpu/paged_attention_simd.h"
#include "backend/cpu/vec_math_avx512.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

using avx512::exp_ps;
using avx512::hmax;
using avx512::hsum;
using avx512::hsum16x16;

float dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void scores(const float* q, const float* k, int64_t n, int64_t hd, float scale, float* s) {
  for (int64_t j = 0; j < n; ++j) s[j] = dot(q, k + j * hd, hd) * scale;
}

void accumulate(float* acc, float r, const float* p, const float* v, int64_t n, int64_t hd) {
  const __m512 rv = _mm512_set1_ps(r);
  int64_t i = 0;
  for (; i + 16 <= hd; i += 16) {
    __m512 a = _mm512_mul_ps(_mm512_loadu_ps(acc + i), rv);
    for (int64_t j = 0; j < n; ++j) a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(v + j * hd + i), a);
    _mm512_storeu_ps(acc + i, a);
  }
  for (; i < hd; ++i) {
    float a = acc[i] * r;
    for (int64_t j = 0; j < n; ++j) a += p[j] * v[j * hd + i];
    acc[i] = a;
  }
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// 16 values from a row of T (float or f16 bits), all lanes or the lanes of m.
template <typename T>
__m512 load16(const T* p) {
  if constexpr (sizeof(T) == 4) return _mm512_loadu_ps(p);
  else return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <typename T>
__m512 load16(const T* p, __mmask16 m) {
  if constexpr (sizeof(T) == 4) return _mm512_maskz_loadu_ps(m, p);
  else return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

// C > 0: hd == 16 C (accumulator rows held in registers); C == 0: any hd.
template <typename T, int C>
void tile_t(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, int64_t n, int64_t hd, float scale,
            float* x) {
  const int64_t nc = C > 0 ? C : (hd + 15) / 16;
  const __mmask16 tail = hd % 16 == 0 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (hd % 16)) - 1u);
  const T* kr[16];
  for (int64_t j = 0; j < 16; ++j) kr[j] = reinterpret_cast<const T*>(k + std::min(j, n - 1) * stride);

  __m512 dots[16];
  for (__m512& d : dots) d = _mm512_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    if (C > 0 || c + 1 < nc || tail == 0xFFFF) {
      const __m512 qc = _mm512_loadu_ps(q + c * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) dots[j] = _mm512_fmadd_ps(qc, load16(kr[j] + c * 16), dots[j]);
    } else {
      const __m512 qc = _mm512_maskz_loadu_ps(tail, q + c * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) dots[j] = _mm512_fmadd_ps(qc, load16(kr[j] + c * 16, tail), dots[j]);
    }
  }
  const __mmask16 live = n >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << n) - 1u);
  const __m512 s = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), live,
                                      _mm512_mul_ps(hsum16x16(dots), _mm512_set1_ps(scale)));
  const float mb = hmax(s);
  float r = 1.0f;
  if (mb > x[0]) {
    r = x[0] == -std::numeric_limits<float>::infinity()
            ? 0.0f
            : _mm512_cvtss_f32(exp_ps(_mm512_set1_ps(x[0] - mb)));
    x[0] = mb;
  }
  const __m512 p = _mm512_maskz_mov_ps(live, exp_ps(_mm512_sub_ps(s, _mm512_set1_ps(x[0]))));
  x[1] = x[1] * r + hsum(p);
  alignas(64) float pj[16];
  _mm512_store_ps(pj, p);

  const __m512 rv = _mm512_set1_ps(r);
  float* acc = x + 2;
  if constexpr (C > 0) {
    __m512 a[C];
    for (int c = 0; c < C; ++c) a[c] = _mm512_mul_ps(_mm512_loadu_ps(acc + c * 16), rv);
    for (int64_t j = 0; j < n; ++j) {
      const __m512 pv = _mm512_set1_ps(pj[j]);
      const T* row = reinterpret_cast<const T*>(v + j * stride);
      for (int c = 0; c < C; ++c) a[c] = _mm512_fmadd_ps(pv, load16(row + c * 16), a[c]);
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + c * 16, a[c]);
  } else {
    for (int64_t c = 0; c < nc; ++c) {
      const __mmask16 m = c + 1 < nc ? __mmask16{0xFFFF} : tail;
      __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + c * 16), rv);
      for (int64_t j = 0; j < n; ++j)
        a = _mm512_fmadd_ps(_mm512_set1_ps(pj[j]), load16(reinterpret_cast<const T*>(v + j * stride) + c * 16, m), a);
      _mm512_mask_storeu_ps(acc + c * 16, m, a);
    }
  }
}

template <typename T>
void tile_of(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, int64_t n, int64_t hd, float scale,
             float* x) {
  switch (hd) {
    case 64: return tile_t<T, 4>(q, k, v, stride, n, hd, scale, x);
    case 128: return tile_t<T, 8>(q, k, v, stride, n, hd, scale, x);
    default: return tile_t<T, 0>(q, k, v, stride, n, hd, scale, x);
  }
}

void tile(const float* q, const uint8_t* k, const uint8_t* v, int64_t stride, bool f16, int64_t n, int64_t hd,
          float scale, float* x) {
  if (f16) tile_of<uint16_t>(q, k, v, stride, n, hd, scale, x);
  else tile_of<float>(q, k, v, stride, n, hd, scale, x);
}

}  // namespace

PagedVecOps paged_vec_ops_avx512() { return PagedVecOps{scores, accumulate, f16_to_f32, tile}; }

}  // namespace sluice::cpu
