// AVX-512 fast ops (compiled with -mavx512*; called only when the CPU has it).
// Every helper has internal linkage; tails use masked loads and stores.
#include <immintrin.h>

#include "backend/cpu/fast_ops_isa.h"
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

using avx512::exp_ps;
using avx512::hsum;

}  // namespace

void rmsnorm_avx512(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    float* ot = out + t * n;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 a = _mm512_loadu_ps(xt + i), b = _mm512_loadu_ps(xt + i + 16);
      s0 = _mm512_fmadd_ps(a, a, s0);
      s1 = _mm512_fmadd_ps(b, b, s1);
    }
    for (; i < n; i += 16) {
      const __m512 a = _mm512_maskz_loadu_ps(tail_mask(n - i < 16 ? n - i : 16), xt + i);
      s0 = _mm512_fmadd_ps(a, a, s0);
    }
    const float ss = hsum(_mm512_add_ps(s0, s1)) / static_cast<float>(n);
    const __m512 inv = _mm512_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss + eps))));
    for (i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i < 16 ? n - i : 16);
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xt + i), inv),
                                     _mm512_maskz_loadu_ps(m, weight + i));
      store_masked(ot + i, m, v);
    }
  }
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

void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i < 16 ? n - i : 16);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    store_masked(out + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
void geglu_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 c1 = _mm512_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m512 c3 = _mm512_set1_ps(-2.0f * 0.79788456080286535588f * 0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i < 16 ? n - i : 16);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 neg2u = _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_mul_ps(g, g), c3, c1));
    const __m512 gelu = _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(neg2u)));
    store_masked(out + i, m, _mm512_mul_ps(gelu, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add_avx512(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

}  // namespace sluice::cpu::fast
