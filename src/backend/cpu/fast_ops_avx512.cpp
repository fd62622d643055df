// AVX-512 fast ops (compiled with -mavx512*; called only when the CPU has it):
// rope, and the shared kernels of fast_ops_simd.h. Every helper has internal
// linkage; tails use masked loads and stores.
#include <immintrin.h>

#include "backend/cpu/fast_ops_simd.h"
#include "backend/cpu/vec_math_avx512.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu::fast {
namespace {

__mmask16 tail_mask(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }

// Masked stores are slow on some cores (Zen 4): store plainly when all lanes are live.
inline void store_masked(float* p, __mmask16 m, __m512 v) {
  if (m == 0xFFFF) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}

void rope_avx512(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox) {
  const int64_t half = n_rot / 2;
  // Lane i of even / odd: element 2i / 2i + 1 of a 32-float (cos, sin) pair run.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int64_t h = 0; h < n_heads; ++h) {
    float* xh = x + h * head_dim;
    if (!neox) {
      // x = [a0 b0 a1 b1 ...], cos_sin = [c0 s0 c1 s1 ...]: even lanes a c - b s, odd lanes b c + a s.
      for (int64_t e = 0; e < n_rot; e += 16) {
        const __mmask16 m = tail_mask(n_rot - e < 16 ? n_rot - e : 16);
        const __m512 v = _mm512_maskz_loadu_ps(m, xh + e);
        const __m512 cs = _mm512_maskz_loadu_ps(m, cos_sin + e);
        const __m512 c = _mm512_moveldup_ps(cs), s = _mm512_movehdup_ps(cs);
        const __m512 swapped = _mm512_permute_ps(v, 0xB1);
        store_masked(xh + e, m, _mm512_fmaddsub_ps(v, c, _mm512_mul_ps(swapped, s)));
      }
    } else {
      // a = x[i], b = x[i + half]: a c - b s, a s + b c.
      for (int64_t i = 0; i < half; i += 16) {
        const int64_t k = half - i < 16 ? half - i : 16;
        const __mmask16 m = tail_mask(k);
        const __m512 lo = _mm512_maskz_loadu_ps(tail_mask(2 * k < 16 ? 2 * k : 16), cos_sin + 2 * i);
        const __m512 hi = _mm512_maskz_loadu_ps(tail_mask(2 * k > 16 ? 2 * k - 16 : 0), cos_sin + 2 * i + 16);
        const __m512 c = _mm512_permutex2var_ps(lo, even, hi), s = _mm512_permutex2var_ps(lo, odd, hi);
        const __m512 a = _mm512_maskz_loadu_ps(m, xh + i), b = _mm512_maskz_loadu_ps(m, xh + i + half);
        store_masked(xh + i, m, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
        store_masked(xh + i + half, m, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
      }
    }
  }
}

}  // namespace

const LevelOps kOpsAvx512 = level_ops<avx512::Vec>(rope_avx512);

}  // namespace sluice::cpu::fast
