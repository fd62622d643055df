// Inline AVX-512 math shared by the *_avx512.cpp kernel files. Include it only
// from files compiled for AVX-512 (the functions use its instructions).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/vec_math_simd.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized, also where the shared templates of vec_math_simd.h and the
// headers like it are instantiated with Vec: off for every file including this.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu::avx512 {

// The lanes of v folded by Op (add, max) by halving: 512 -> 256 -> 128 -> 64
// -> 32 bits (a fixed order: the same lanes give the same bits). Op::v8, v4
// and ss are its 8-lane, 4-lane and lowest-lane forms.
template <class Op>
inline float fold(__m512 v) {
  const __m256 h = Op::v8(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = Op::v4(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = Op::v4(s, _mm_movehl_ps(s, s));
  s = Op::ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct AddOp {
  static __m256 v8(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m128 v4(__m128 a, __m128 b) { return _mm_add_ps(a, b); }
  static __m128 ss(__m128 a, __m128 b) { return _mm_add_ss(a, b); }
};

struct MaxOp {
  static __m256 v8(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static __m128 v4(__m128 a, __m128 b) { return _mm_max_ps(a, b); }
  static __m128 ss(__m128 a, __m128 b) { return _mm_max_ss(a, b); }
};

// Sum of the 16 lanes.
inline float hsum(__m512 v) { return fold<AddOp>(v); }

// Largest of the 16 lanes.
inline float hmax(__m512 v) { return fold<MaxOp>(v); }

// The 16-lane vector of the shared templates (vec_math_simd.h).
struct Vec {
  using F = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static Mask mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, Mask m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F select(Mask m, F on, F off) { return _mm512_mask_mov_ps(off, m, on); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static float hsum(F v) { return avx512::hsum(v); }
  static float hmax(F v) { return avx512::hmax(v); }
  static F exp(F x);
  // Doubles: lanes 0..7 and 8..15 widened; the 8 lanes of s summed in a fixed order.
  using D = __m512d;
  static D pd_lo(F v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
  static D pd_hi(F v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }
  static double pd_hsum(D s) {
    const __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }
};

// e^x, relative error ~2 ulp (simd::exp_reduced), scaled by 2^n with vscalefps
// (underflows to 0 below about -103, overflows to inf above 88.7). NaN propagates.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // max(c, NaN) = NaN
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  __m512 n;
  const __m512 p = simd::exp_reduced<Vec>(x, &n);
  return _mm512_scalef_ps(p, n);
}

inline __m512 Vec::exp(__m512 x) { return exp_ps(x); }

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
