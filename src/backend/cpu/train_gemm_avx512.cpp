// The AVX-512 level of the training kernels (train_gemm.h): the AVX2 level
// (train_gemm_avx2.cpp) widened to 16 lanes, with masks for tails; compiled
// for AVX-512 only and called only when the CPU has it.
//
// tile(): 6 rows x 32 columns of C in twelve 16-lane accumulators, the same
// loop as AVX2's 6 x 16. Dequantization is the shared 256-bit code
// (train_panel_simd.h): it is not where the time goes.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/train_panel_simd.h"
#include "backend/cpu/train_gemm.h"
#include "backend/cpu/vec_math_avx512.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

using avx512::exp_ps;

constexpr int64_t kMr = 6;
constexpr int64_t kNr = 32;

// Lanes [0, k) on, k in 0..16.
__mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

void tile_avx512(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int64_t m, int64_t n,
                 bool load_c) {
  alignas(64) float edge[kMr * kNr];
  const bool full = m == kMr && n == kNr;
  float* cc = full ? c : edge;
  const int64_t ldcc = full ? ldc : kNr;
  if (!full) {
    std::fill(edge, edge + kMr * kNr, 0.0f);
    if (load_c)
      for (int64_t i = 0; i < m; ++i) std::copy(c + i * ldc, c + i * ldc + n, edge + i * kNr);
  }
  __m512 acc[kMr][2];
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) {
    acc[i][0] = load_c || !full ? _mm512_loadu_ps(cc + i * ldcc) : _mm512_setzero_ps();
    acc[i][1] = load_c || !full ? _mm512_loadu_ps(cc + i * ldcc + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk, ap += kMr, bp += kNr) {
    const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 6
    for (int64_t i = 0; i < kMr; ++i) {
      const __m512 a = _mm512_set1_ps(ap[i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) {
    _mm512_storeu_ps(cc + i * ldcc, acc[i][0]);
    _mm512_storeu_ps(cc + i * ldcc + 16, acc[i][1]);
  }
  if (!full)
    for (int64_t i = 0; i < m; ++i) std::copy(edge + i * kNr, edge + i * kNr + n, c + i * ldc);
}

// Sums 16 lanes of e into two double accumulators (lanes 0..7, 8..15).
inline void add_pd(__m512 e, __m512d& s0, __m512d& s1) {
  s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
  s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
}

double exp_sum_avx512(const float* x, float shift, float* out, int64_t n) {
  const __m512 sh = _mm512_set1_ps(shift);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = tail_mask(std::min<int64_t>(16, n - i));
    const __m512 e = _mm512_maskz_mov_ps(mk, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), sh)));
    _mm512_mask_storeu_ps(out + i, mk, e);
    add_pd(e, s0, s1);
  }
  const __m512d s = _mm512_add_pd(s0, s1);
  const __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

float max_avx512(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  __m512 m = ninf;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = tail_mask(std::min<int64_t>(16, n - i));
    m = _mm512_max_ps(m, _mm512_mask_loadu_ps(ninf, mk, x + i));
  }
  return avx512::hmax(m);
}

inline __m512 tanh_ps(__m512 y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_ps(_mm512_add_ps(y, y));
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

void softcap_avx512(float* x, int64_t n, float cap) {
  const __m512 c = _mm512_set1_ps(cap), inv = _mm512_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = tail_mask(std::min<int64_t>(16, n - i));
    const __m512 v = _mm512_maskz_loadu_ps(mk, x + i);
    _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(c, tanh_ps(_mm512_mul_ps(v, inv))));
  }
}

void glu_backward_avx512(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                         bool gelu) {
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  const __m512 k1 = _mm512_set1_ps(0.79788456080286535588f);
  const __m512 k3 = _mm512_set1_ps(0.79788456080286535588f * 0.044715f);
  const __m512 k3d = _mm512_set1_ps(3.0f * 0.79788456080286535588f * 0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mk = tail_mask(std::min<int64_t>(16, n - i));
    const __m512 x = _mm512_maskz_loadu_ps(mk, g + i);
    __m512 act, deriv;
    if (!gelu) {
      const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
      act = _mm512_mul_ps(x, s);
      deriv = _mm512_mul_ps(s, _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one));
    } else {
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 y = _mm512_mul_ps(x, _mm512_fmadd_ps(k3, x2, k1));
      const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0f), y))));
      const __m512 dy = _mm512_fmadd_ps(k3d, x2, k1);
      act = _mm512_mul_ps(x, s);
      deriv = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(two, act), _mm512_sub_ps(one, s)), dy, s);
    }
    const __m512 h = _mm512_maskz_loadu_ps(mk, dh + i);
    _mm512_mask_storeu_ps(dg + i, mk, _mm512_mul_ps(_mm512_mul_ps(h, _mm512_maskz_loadu_ps(mk, u + i)), deriv));
    _mm512_mask_storeu_ps(du + i, mk, _mm512_mul_ps(h, act));
  }
}

}  // namespace

TrainKernels train_kernels_avx512() {
  return TrainKernels{.mr = kMr,
                      .nr = kNr,
                      .tile = tile_avx512,
                      .pack_a6 = pack_a6_simd,
                      .pack_b_t = pack_b_t_simd<kNr>,
                      .dequantize = dequantize_simd,
                      .exp_sum = exp_sum_avx512,
                      .max = max_avx512,
                      .softcap = softcap_avx512,
                      .glu_backward = glu_backward_avx512,
                      .name = "avx512"};
}

}  // namespace sluice::cpu
