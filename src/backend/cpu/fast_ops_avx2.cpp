// AVX2 + FMA fast ops (compiled with -mavx2 -mfma -mf16c; called only when the
// CPU has them): rope, and the shared kernels of fast_ops_simd.h. Every helper
// has internal linkage; tails use vmaskmovps.
#include <immintrin.h>

#include "backend/cpu/fast_ops_simd.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu::fast {
namespace {

__m256i tail_mask(int64_t k) { return avx2::Vec::mask(k); }

void rope_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    if (!neox) {
      // x = [a0 b0 a1 b1 ...], cos_sin = [c0 s0 c1 s1 ...]: even lanes a c - b s, odd lanes b c + a s.
      for (int64_t e = 0; e < n_rot; e += 8) {
        const __m256i m = tail_mask(n_rot - e < 8 ? n_rot - e : 8);
        const __m256 v = _mm256_maskload_ps(xh + e, m);
        const __m256 cs = _mm256_maskload_ps(cos_sin + e, m);
        const __m256 c = _mm256_moveldup_ps(cs), s = _mm256_movehdup_ps(cs);
        const __m256 swapped = _mm256_permute_ps(v, 0xB1);
        _mm256_maskstore_ps(xh + e, m, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(swapped, s)));
      }
    } else {
      // a = x[i], b = x[i + half]: a c - b s, a s + b c.
      for (int64_t i = 0; i < half; i += 8) {
        const int64_t k = half - i < 8 ? half - i : 8;
        const __m256i m = tail_mask(k);
        const __m256 lo = _mm256_maskload_ps(cos_sin + 2 * i, tail_mask(2 * k < 8 ? 2 * k : 8));
        const __m256 hi = _mm256_maskload_ps(cos_sin + 2 * i + 8, tail_mask(2 * k > 8 ? 2 * k - 8 : 0));
        // shuffle: [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6]; permute 64-bit pairs 0,2,1,3 -> c0..c7.
        const __m256 c = _mm256_castpd_ps(
            _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
        const __m256 s = _mm256_castpd_ps(
            _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
        const __m256 a = _mm256_maskload_ps(xh + i, m), b = _mm256_maskload_ps(xh + i + half, m);
        _mm256_maskstore_ps(xh + i, m, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_maskstore_ps(xh + i + half, m, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
      }
    }
  }
}

}  // namespace

const LevelOps kOpsAvx2 = level_ops<avx2::Vec>(rope_avx2);

}  // namespace sluice::cpu::fast
