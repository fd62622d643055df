// AVX2 activation quantizers: the same float operations as the scalar ones in
// act_quant.cpp, so the bytes are identical. Helpers have internal linkage (this
// file is compiled for AVX2 only).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"

namespace sluice::cpu {
namespace {

// max |x[i]| over 8 * n_vec floats.
float abs_max(const float* x, int n_vec) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n_vec; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// q[0..32*n_vec) = round(x * id) as int8, 32 at a time.
void quantize_to(const float* x, int n_vec, float id, int8_t* q) {
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n_vec; ++i) {
    const float* xi = x + 32 * i;
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi), vid));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + 8), vid));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + 16), vid));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xi + 24), vid));
    // packs interleave 128-bit lanes; the permute puts the 4-element runs back.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * i), _mm256_permutevar8x32_epi32(p, order));
  }
}

// Quantizes the n (a multiple of 32) floats at x: returns the scale d = amax /
// 127, writes q[n].
float quantize_block(const float* x, int n, int8_t* q) {
  const float amax = abs_max(x, n / 8);
  quantize_to(x, n / 32, amax > 0.0f ? 127.0f / amax : 0.0f, q);
  return amax / 127.0f;
}

// Sums of each 4 consecutive int8 of q[32] as 8 int32.
__m256i sum4(const int8_t* q) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
}

}  // namespace

void convert_act_q8x64_avx2(const float* x, void* dst, int64_t n_in, int32_t off) {
  auto* g = static_cast<ActQ8x64*>(dst);
  const int64_t n_blocks = n_in / 32;
  const __m256i neg_off = _mm256_set1_epi32(-off);
  for (int64_t b = 0; b < n_blocks; ++b) {
    ActQ8x64& out = g[b / 2];
    const int h = static_cast<int>(b % 2);
    const float* xb = x + b * 32;
    const float d = quantize_block(xb, 32, out.q + 32 * h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.corr + 8 * h),
                        _mm256_mullo_epi32(sum4(out.q + 32 * h), neg_off));
    _mm256_storeu_ps(out.d + 8 * h, _mm256_set1_ps(d));
  }
  if (n_blocks % 2 == 1) {
    ActQ8x64& out = g[n_blocks / 2];
    std::memset(out.q + 32, 0, 32);
    std::memset(out.corr + 8, 0, 8 * sizeof(int32_t));
    std::memset(out.d + 8, 0, 8 * sizeof(float));
  }
}

void convert_act_q8x256_avx2(const float* x, void* dst, int64_t n_in) {
  auto* blocks = static_cast<ActQ8x256*>(dst);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t blk = 0; blk < n_in / 256; ++blk) {
    const float* xb = x + blk * 256;
    ActQ8x256& out = blocks[blk];
    out.d = quantize_block(xb, 256, out.q);
    // Each 32 bytes holds sub-blocks 2k, 2k+1; two hadds of four such vectors
    // give [bs0 bs2 bs4 bs6 | bs1 bs3 bs5 bs7], which the permute orders.
    __m256i half[2];
    for (int h = 0; h < 2; ++h) {
      const int8_t* q = out.q + 128 * h;
      const __m256i ab = _mm256_hadd_epi32(sum4(q), sum4(q + 32));
      const __m256i cd = _mm256_hadd_epi32(sum4(q + 64), sum4(q + 96));
      half[h] = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(ab, cd), order);
    }
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(half[0], half[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.bsum), packed);
    std::memset(out.pad, 0, sizeof(out.pad));
  }
}

}  // namespace sluice::cpu
