// Inline AVX2 + FMA math shared by the *_avx2.cpp kernel files. Include it only
// from files compiled for AVX2 (the functions use its instructions).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/vec_math_simd.h"

namespace sluice::cpu::avx2 {

// Sum of the 8 lanes, by halving (a fixed order: the same lanes give the same bits).
inline float hsum(__m256 v) {
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// Largest of the 8 lanes.
inline float hmax(__m256 v) {
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

// Lane j of the result is the sum of the lanes of a[j], for 8 vectors at once
// (two levels of pairwise adds within 128-bit halves, then the halves).
inline __m256 hsum8x8(const __m256 (&a)[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [a0 a1 a2 a3 | a0 a1 a2 a3] (low | high half sums)
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // [a4 a5 a6 a7 | a4 a5 a6 a7]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane masks: 8 ints at kTailMask + 8 - k have lanes [0, k) on.
alignas(32) inline constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// The 8-lane vector of the shared templates (vec_math_simd.h).
struct Vec {
  using F = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8;
  static Mask mask(int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - k)); }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, Mask m, F v) { _mm256_maskstore_ps(p, m, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F select(Mask m, F on, F off) { return _mm256_blendv_ps(off, on, _mm256_castsi256_ps(m)); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static float hsum(F v) { return avx2::hsum(v); }
  static float hmax(F v) { return avx2::hmax(v); }
  static F exp(F x);
  // Doubles: lanes 0..3 and 4..7 widened; the 4 lanes of s summed in a fixed order.
  using D = __m256d;
  static D pd_lo(F v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
  static D pd_hi(F v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
  static double pd_hsum(D s) {
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }
};

// e^x, relative error ~2 ulp (simd::exp_reduced), times 2^n built in the
// exponent field. x is clamped to [-87.3, 88.3] so 2^n stays a normal float;
// results below -87.3 (and e^-inf) are 0. NaN propagates.
inline __m256 exp_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x);  // max(c, NaN) = NaN
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), x);
  __m256 n;
  const __m256 p = simd::exp_reduced<Vec>(x, &n);
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

inline __m256 Vec::exp(__m256 x) { return exp_ps(x); }

}  // namespace sluice::cpu::avx2
