// AVX2 + FMA fast ops (compiled with -mavx2 -mfma -mf16c; called only when the
// CPU has them). Every helper has internal linkage; tails use vmaskmovps.
#include <immintrin.h>

#include "backend/cpu/fast_ops_isa.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu::fast {
namespace {

using avx2::exp_ps;
using avx2::hsum;

// Lane masks for the first k < 8 lanes: load 8 ints at kTailMask + 8 - k.
alignas(32) const int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

__m256i tail_mask(int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - k)); }

}  // namespace

void rmsnorm_avx2(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    float* ot = out + t * n;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256 a = _mm256_loadu_ps(xt + i), b = _mm256_loadu_ps(xt + i + 8);
      s0 = _mm256_fmadd_ps(a, a, s0);
      s1 = _mm256_fmadd_ps(b, b, s1);
    }
    for (; i < n; i += 8) {
      const __m256 a = _mm256_maskload_ps(xt + i, tail_mask(n - i < 8 ? n - i : 8));
      s0 = _mm256_fmadd_ps(a, a, s0);
    }
    const float ss = hsum(_mm256_add_ps(s0, s1)) / static_cast<float>(n);
    const __m256 inv = _mm256_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss + eps))));
    for (i = 0; i + 8 <= n; i += 8)
      _mm256_storeu_ps(ot + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xt + i), inv), _mm256_loadu_ps(weight + i)));
    if (i < n) {
      const __m256i m = tail_mask(n - i);
      _mm256_maskstore_ps(ot + i, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(xt + i, m), inv),
                                                   _mm256_maskload_ps(weight + i, m)));
    }
  }
}

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

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask(n - i < 8 ? n - i : 8);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(silu, _mm256_maskload_ps(up + i, m)));
  }
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 c1 = _mm256_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m256 c3 = _mm256_set1_ps(-2.0f * 0.79788456080286535588f * 0.044715f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = tail_mask(n - i < 8 ? n - i : 8);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 neg2u = _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_mul_ps(g, g), c3, c1));
    const __m256 gelu = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(neg2u)));
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(gelu, _mm256_maskload_ps(up + i, m)));
  }
}

void add_avx2(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m, _mm256_add_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

}  // namespace sluice::cpu::fast
