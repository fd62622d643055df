// The AVX2 + FMA level of the training kernels (train_gemm.h); compiled for
// AVX2 only and called only when the CPU has it.
//
// tile(): 6 rows x 16 columns of C in twelve 8-lane accumulators. Per kk, two
// loads of the B strip, six broadcasts of the A panel and twelve FMAs: the
// two FMA ports stay busy with loads to spare.
//
//        bp[kk]:  [ b0 (8 lanes) | b1 (8 lanes) ]
//   ap[kk][0] ->  acc[0][0]        acc[0][1]
//   ...                 += a * b
//   ap[kk][5] ->  acc[5][0]        acc[5][1]
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/train_panel_simd.h"
#include "backend/cpu/train_gemm.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {
namespace {

using avx2::exp_ps;

constexpr int64_t kMr = 6;
constexpr int64_t kNr = 16;

alignas(32) const int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Lanes [0, k) on, k in 0..8.
__m256i tail_mask(int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - k)); }

void tile_avx2(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int64_t m, int64_t n,
               bool load_c) {
  // Edge tiles run through a full-size copy of their part of C.
  alignas(32) float edge[kMr * kNr];
  const bool full = m == kMr && n == kNr;
  float* cc = full ? c : edge;
  const int64_t ldcc = full ? ldc : kNr;
  if (!full) {
    std::fill(edge, edge + kMr * kNr, 0.0f);
    if (load_c)
      for (int64_t i = 0; i < m; ++i) std::copy(c + i * ldc, c + i * ldc + n, edge + i * kNr);
  }
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) {
    acc[i][0] = load_c || !full ? _mm256_loadu_ps(cc + i * ldcc) : _mm256_setzero_ps();
    acc[i][1] = load_c || !full ? _mm256_loadu_ps(cc + i * ldcc + 8) : _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk, ap += kMr, bp += kNr) {
    const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
    for (int64_t i = 0; i < kMr; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + i);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t i = 0; i < kMr; ++i) {
    _mm256_storeu_ps(cc + i * ldcc, acc[i][0]);
    _mm256_storeu_ps(cc + i * ldcc + 8, acc[i][1]);
  }
  if (!full)
    for (int64_t i = 0; i < m; ++i) std::copy(edge + i * kNr, edge + i * kNr + n, c + i * ldc);
}

// Sums 8 lanes of e into two double accumulators (lanes 0..3, 4..7).
inline void add_pd(__m256 e, __m256d& s0, __m256d& s1) {
  s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

double exp_sum_avx2(const float* x, float shift, float* out, int64_t n) {
  const __m256 sh = _mm256_set1_ps(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    _mm256_storeu_ps(out + i, e);
    add_pd(e, s0, s1);
  }
  if (i < n) {
    const __m256i mk = tail_mask(n - i);
    // Masked-off lanes read as 0 and would give e^(-shift): zero them after.
    const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, mk), sh)), _mm256_castsi256_ps(mk));
    _mm256_maskstore_ps(out + i, mk, e);
    add_pd(e, s0, s1);
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

float max_avx2(const float* x, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
  __m256 m = ninf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i mk = tail_mask(n - i);
    m = _mm256_max_ps(m, _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i, mk), _mm256_castsi256_ps(mk)));
  }
  return avx2::hmax(m);
}

// tanh(y) = 1 - 2 / (e^(2y) + 1); e^(2y) saturates to 0 or a huge value, so
// the result stays in [-1, 1].
inline __m256 tanh_ps(__m256 y) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp_ps(_mm256_add_ps(y, y));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

void softcap_avx2(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.0f / cap);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mk = tail_mask(std::min<int64_t>(8, n - i));
    const __m256 v = _mm256_maskload_ps(x + i, mk);
    _mm256_maskstore_ps(x + i, mk, _mm256_mul_ps(c, tanh_ps(_mm256_mul_ps(v, inv))));
  }
}

void glu_backward_avx2(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n, bool gelu) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 k1 = _mm256_set1_ps(0.79788456080286535588f);
  const __m256 k3 = _mm256_set1_ps(0.79788456080286535588f * 0.044715f);
  const __m256 k3d = _mm256_set1_ps(3.0f * 0.79788456080286535588f * 0.044715f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mk = tail_mask(std::min<int64_t>(8, n - i));
    const __m256 x = _mm256_maskload_ps(g + i, mk);
    __m256 act, deriv;
    if (!gelu) {
      const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x))));
      act = _mm256_mul_ps(x, s);
      deriv = _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
    } else {
      // y = k1 x + k3 x^3, s = sigmoid(2y): act = x s, act' = s + 2 x s (1 - s) y'.
      const __m256 x2 = _mm256_mul_ps(x, x);
      const __m256 y = _mm256_mul_ps(x, _mm256_fmadd_ps(k3, x2, k1));
      const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), y))));
      const __m256 dy = _mm256_fmadd_ps(k3d, x2, k1);
      act = _mm256_mul_ps(x, s);
      deriv = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(two, act), _mm256_sub_ps(one, s)), dy, s);
    }
    const __m256 h = _mm256_maskload_ps(dh + i, mk);
    _mm256_maskstore_ps(dg + i, mk, _mm256_mul_ps(_mm256_mul_ps(h, _mm256_maskload_ps(u + i, mk)), deriv));
    _mm256_maskstore_ps(du + i, mk, _mm256_mul_ps(h, act));
  }
}

}  // namespace

TrainKernels train_kernels_avx2() {
  return TrainKernels{.mr = kMr,
                      .nr = kNr,
                      .tile = tile_avx2,
                      .pack_a6 = pack_a6_simd,
                      .pack_b_t = pack_b_t_simd<kNr>,
                      .dequantize = dequantize_simd,
                      .exp_sum = exp_sum_avx2,
                      .max = max_avx2,
                      .softcap = softcap_avx2,
                      .glu_backward = glu_backward_avx2,
                      .name = "avx2"};
}

}  // namespace sluice::cpu
