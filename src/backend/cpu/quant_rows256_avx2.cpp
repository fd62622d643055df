// AVX2 kernels for quantized weights x ActQ8x256 activations (Q4_K, Q6_K; Q8_0
// and Q4_0 have their own file, quant_x8_avx2.cpp).
//
// Same structure as the AVX-512 kernels (one tile template over NR rows x NT
// tokens, used with NT = 1 for decode, so y does not depend on n_tok or the row
// split) on 256-bit vectors, with maddubs (u8 x s8 -> pairs of int16) + madd
// (-> int32) in place of VNNI. Compiled for AVX2 only: everything here has
// internal linkage except the quant_rows_*_avx2 functions.
//
// Lanes (8 int32 / 8 f32):
//   Q4_K  per 32 elements: maddubs, madd with the 6-bit scale, summed over the
//         super-block; acc += cvt * d*ad, -= cvt(mins) * dmin*ad.
//   Q6_K  per 32 elements (2 sub-blocks of 16): maddubs, madd with the int8
//         scales, summed, minus 32 * sum(sc * qsum); acc += cvt * d*ad.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_tile_avx2.h"
#include "base/check.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace {

// ------------------------------------------------------------------------ Q4_K --

struct KernelQ4_K {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 256;
    const BlockQ4_K* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ4_K*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x256* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x256*>(a.xa + (t + j) * a.xa_stride);
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i sc[NR];    // [sc0..sc7] int16 in both 128-bit lanes
      __m256i mins[NR];  // [m0 m0 m1 m1 .. m7 m7] int16
      float d[NR], dmin[NR];
      for (int i = 0; i < NR; ++i) {
        const BlockQ4_K& blk = wr[i][b];
        uint64_t sc_bytes = 0, m_bytes = 0;
        q4_k_scales_mins(blk.scales, &sc_bytes, &m_bytes);
        const __m128i s8 = _mm_cvtsi64_si128(static_cast<long long>(sc_bytes));
        const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(m_bytes));
        sc[i] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s8));
        const __m128i m16 = _mm_cvtepu8_epi16(m8);
        mins[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m16, m16)),
                                          _mm_unpackhi_epi16(m16, m16), 1);
        d[i] = f16(blk.d);
        dmin[i] = f16(blk.dmin);
      }
      __m256i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {  // sub-block s: nibble half s % 2 of qs chunk s / 2
        const __m256i pick = _mm256_set1_epi16(static_cast<short>((2 * s) | ((2 * s + 1) << 8)));
        __m256i wv[NR], scv[NR];
        for (int i = 0; i < NR; ++i) {
          const __m256i v = loadu256(wr[i][b].qs + 32 * (s / 2));
          wv[i] = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(v, 4) : v, nib);
          scv[i] = _mm256_shuffle_epi8(sc[i], pick);
        }
        for (int j = 0; j < NT; ++j) {
          const __m256i aq = loadu256(xt[j][b].q + 32 * s);
          for (int i = 0; i < NR; ++i)
            isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[i], aq), scv[i]));
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = loadu256(x.bsum);
        for (int i = 0; i < NR; ++i) {
          const __m256 dot = _mm256_cvtepi32_ps(isum[i][j]);
          const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, mins[i]));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
          acc[i][j] = _mm256_fnmadd_ps(msum, _mm256_set1_ps(dmin[i] * x.d), acc[i][j]);
        }
      }
    }
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

// ------------------------------------------------------------------------ Q6_K --

struct KernelQ6_K {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 256;
    const BlockQ6_K* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ6_K*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x256* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x256*>(a.xa + (t + j) * a.xa_stride);
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i sc16[NR];
      __m128i sc8[NR];
      float d[NR];
      for (int i = 0; i < NR; ++i) {
        sc8[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[i][b].scales));
        sc16[i] = _mm256_cvtepi8_epi16(sc8[i]);
        d[i] = f16(wr[i][b].d);
      }
      __m256i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 4; ++k) {  // elements 128h + 32k .. +31: sub-blocks 8h + 2k, 8h + 2k + 1
          const long long s0 = 8 * h + 2 * k, s1 = s0 + 1;
          const __m128i pick = _mm_set_epi64x(s1 * 0x0101010101010101LL, s0 * 0x0101010101010101LL);
          __m256i wv[NR], scv[NR];
          for (int i = 0; i < NR; ++i) {
            const BlockQ6_K& blk = wr[i][b];
            const __m256i ql = loadu256(blk.ql + 64 * h + 32 * (k % 2));
            const __m256i qh = loadu256(blk.qh + 32 * h);
            const __m256i low = k < 2 ? _mm256_and_si256(ql, low4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
            __m256i high;  // bits 2k, 2k+1 of qh moved to bits 4, 5
            switch (k) {
              case 0: high = _mm256_slli_epi16(qh, 4); break;
              case 1: high = _mm256_slli_epi16(qh, 2); break;
              case 2: high = qh; break;
              default: high = _mm256_srli_epi16(qh, 2); break;
            }
            wv[i] = _mm256_or_si256(low, _mm256_and_si256(high, bits45));
            scv[i] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8[i], pick));
          }
          for (int j = 0; j < NT; ++j) {
            const __m256i aq = loadu256(xt[j][b].q + 128 * h + 32 * k);
            for (int i = 0; i < NR; ++i)
              isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[i], aq), scv[i]));
          }
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = loadu256(x.bsum);
        for (int i = 0; i < NR; ++i) {
          const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsum, sc16[i]), 5);  // 32 * sc * qsum
          const __m256 dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[i][j], offset));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
        }
      }
    }
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

}  // namespace

void quant_rows_q4_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                          size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                          int64_t r1) {
  rows<KernelQ4_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

void quant_rows_q6_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                          size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                          int64_t r1) {
  rows<KernelQ6_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

}  // namespace sluice::cpu
