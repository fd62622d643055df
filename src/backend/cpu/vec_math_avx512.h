// Inline AVX-512 math shared by the *_avx512.cpp kernel files. Include it only
// from files compiled for AVX-512 (the functions use its instructions).
#pragma once

#include <immintrin.h>

namespace sluice::cpu::avx512 {

// Sum of the 16 lanes, by halving (a fixed order: the same lanes give the same bits).
inline float hsum(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Largest of the 16 lanes.
inline float hmax(__m512 v) {
  const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x, relative error ~2 ulp: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-7
// Taylor polynomial, scaled by 2^n with vscalefps (underflows to 0 below
// about -103, overflows to inf above 88.7). NaN propagates.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // max(c, NaN) = NaN
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Lane j of the result is the sum of the lanes of a[j], for 16 vectors at once
// (a transpose-and-add tree: 8 + 4 + 2 shuffles deep instead of 16 hsums).
inline __m512 hsum16x16(const __m512 (&a)[16]) {
  __m512 u[8];
  for (int i = 0; i < 8; ++i) {  // quarters: [a2i 0+2, a2i 1+3, a2i+1 0+2, a2i+1 1+3]
    const __m512 lo = _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    u[i] = _mm512_add_ps(lo, hi);
  }
  __m512 w[4];
  for (int k = 0; k < 4; ++k) {  // quarter q: four partial sums of a[4k + q]
    const __m512 lo = _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1));
    w[k] = _mm512_add_ps(lo, hi);
  }
  const __m512 s0 = _mm512_add_ps(_mm512_unpacklo_ps(w[0], w[1]), _mm512_unpackhi_ps(w[0], w[1]));
  const __m512 s1 = _mm512_add_ps(_mm512_unpacklo_ps(w[2], w[3]), _mm512_unpackhi_ps(w[2], w[3]));
  const __m512 r = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s0), _mm512_castps_pd(s1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s0), _mm512_castps_pd(s1))));
  // Lane 4q + e holds the sum of a[4e + q]: transpose the 4x4 lane index.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, r);
}

}  // namespace sluice::cpu::avx512
