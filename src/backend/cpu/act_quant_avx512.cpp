// AVX-512 activation quantizers: the same float operations as the scalar ones in
// act_quant.cpp (max |x|, 127 / amax, x * that, round to nearest even), so the
// bytes are identical. Helpers have internal linkage (this file is compiled for
// AVX-512 only).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

// max |x[i]| over 16 * n_vec floats.
float abs_max(const float* x, int n_vec) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < n_vec; ++i) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)));
  return _mm512_reduce_max_ps(m);
}

// q[0..16*n_vec) = round(x * id) as int8.
void quantize_to(const float* x, int n_vec, float id, int8_t* q) {
  const __m512 vid = _mm512_set1_ps(id);
  for (int i = 0; i < n_vec; ++i) {
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * i), vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * i), _mm512_cvtsepi32_epi8(v));
  }
}

// Quantizes the n (a multiple of 16) floats at x: returns the scale d = amax /
// 127, writes q[n].
float quantize_block(const float* x, int n, int8_t* q) {
  const float amax = abs_max(x, n / 16);
  quantize_to(x, n / 16, amax > 0.0f ? 127.0f / amax : 0.0f, q);
  return amax / 127.0f;
}

}  // namespace

void convert_act_q8x64_avx512(const float* x, void* dst, int64_t n_in, int32_t off) {
  auto* g = static_cast<ActQ8x64*>(dst);
  const int64_t n_blocks = n_in / 32;
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i neg_off = _mm512_set1_epi32(-off);
  for (int64_t b = 0; b < n_blocks; b += 2) {
    ActQ8x64& out = g[b / 2];
    const float d0 = quantize_block(x + b * 32, 32, out.q);
    float d1 = 0.0f;
    if (b + 1 < n_blocks) {
      d1 = quantize_block(x + (b + 1) * 32, 32, out.q + 32);
    } else {
      std::memset(out.q + 32, 0, 32);
    }
    const __m512i q = _mm512_loadu_si512(out.q);
    // Sum of each 4 bytes (unsigned 1 x signed q), times -off.
    const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, q);
    _mm512_storeu_si512(out.corr, _mm512_mullo_epi32(sum4, neg_off));
    const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
    _mm512_storeu_ps(out.d, d);
  }
}

void convert_act_q8x256_avx512(const float* x, void* dst, int64_t n_in) {
  auto* blocks = static_cast<ActQ8x256*>(dst);
  const __m512i ones = _mm512_set1_epi8(1);
  // Picks lane 0 of each 128-bit chunk of four vectors: [a0 a4 a8 a12 b0 ... d12].
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t blk = 0; blk < n_in / 256; ++blk) {
    const float* xb = x + blk * 256;
    ActQ8x256& out = blocks[blk];
    out.d = quantize_block(xb, 256, out.q);
    // Per 16 bytes: sums of 4 bytes, then within each 128-bit chunk.
    __m512i s[4];
    for (int k = 0; k < 4; ++k) {
      __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(out.q + 64 * k));
      v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
      s[k] = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    }
    const __m512i lo = _mm512_permutex2var_epi32(s[0], pick, s[1]);  // bsum 0..7 in lanes 0..7
    const __m512i hi = _mm512_permutex2var_epi32(s[2], pick, s[3]);  // bsum 8..15
    const __m512i all = _mm512_inserti64x4(lo, _mm512_castsi512_si256(hi), 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.bsum), _mm512_cvtepi32_epi16(all));
    std::memset(out.pad, 0, sizeof(out.pad));
  }
}

}  // namespace sluice::cpu
