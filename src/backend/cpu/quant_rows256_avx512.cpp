// AVX-512 VNNI kernels for quantized weights x ActQ8x64 / ActQ8x256 activations.
//
// Every type is written as one tile template over NR rows x NT tokens: the weight
// blocks of the NR rows are unpacked once per step and multiplied with the NT
// tokens' activations, so weights are reused across tokens and activations
// across rows. A single token (decode) runs the same template with NT = 1, and a
// (row, token) pair goes through the same instructions in any tile, which is what
// makes y independent of n_tok and of the row split. Compiled for AVX-512 only:
// everything here has internal linkage except the quant_rows_*_avx512 functions.
//
// Lanes:
//   Q8_0         one zmm = 16 rows: quant_q8_0x16_avx512.cpp.
//   Q4_0         one zmm = two blocks of 32 (bytes 0..31 block b, 32..63 block b+1);
//                weights as unsigned bytes (the nibbles = w + 8); vpdpbusd starts
//                from ActQ8x64::corr, so each int32 lane ends at the exact signed
//                dot of its 4 bytes; then acc[16 f32] += cvt(lane) * (wd * ad)
//                per block pair.
//   Q4_K         per 64 elements (sub-blocks 2c | 2c+1): maddubs, then vpdpwssd
//                with the 6-bit scales into 16 int32 lanes for the super-block;
//                folded to 8 lanes; acc[8 f32] += cvt * d*ad, -= cvt(mins) * dmin*ad.
//   Q6_K         per 64 elements (4 sub-blocks of 16): maddubs, vpdpwssd with the
//                int8 scales; folded to 8 lanes minus 32 * sum(sc * qsum);
//                acc[8 f32] += cvt * d*ad.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_tile_avx512.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

// ------------------------------------------------------------------------ Q4_0 --

// The NR x NT block-pair step of Q4_0: wv[i] holds the unsigned
// (offset) weight bytes of row i, ws[i] its scales.
template <int NR, int NT>
[[gnu::always_inline]] inline void pair_step(__m512 (&acc)[NR][NT], const __m512i (&wv)[NR],
                                             const __m512 (&ws)[NR], const ActQ8x64* const (&xt)[NT],
                                             int64_t g) {
  for (int j = 0; j < NT; ++j) {
    const ActQ8x64& a = xt[j][g];
    const __m512i aq = _mm512_loadu_si512(a.q);
    const __m512i corr = _mm512_loadu_si512(a.corr);
    const __m512 ad = _mm512_loadu_ps(a.d);
    for (int i = 0; i < NR; ++i) {
      const __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, wv[i], aq));
      acc[i][j] = _mm512_fmadd_ps(lanes, _mm512_mul_ps(ws[i], ad), acc[i][j]);
    }
  }
}

struct KernelQ4_0 {
  // Two consecutive blocks (36 bytes = words 0..17: d0, qs0[16], d1, qs1[16]) are
  // loaded once (masked, so nothing past them is touched) and rearranged by word
  // permutes: nibbles as [lo(qs0) | hi(qs0) | lo(qs1) | hi(qs1)], 16 bytes each
  // (the activations' element order), scales as [d0 x 8 | d1 x 8].
  struct Consts {
    __m512i nib_words = _mm512_setr_epi32(0x20001, 0x40003, 0x60005, 0x80007, 0x20001, 0x40003, 0x60005, 0x80007,
                                          0xB000A, 0xD000C, 0xF000E, 0x110010, 0xB000A, 0xD000C, 0xF000E, 0x110010);
    __m512i nib_shift = _mm512_setr_epi32(0, 0, 0, 0, 0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004,
                                          0x40004, 0x40004, 0x40004);
    __m512i scale_words = _mm512_setr_epi32(0, 0, 0, 0, 0x90009, 0x90009, 0x90009, 0x90009, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512i low4 = _mm512_set1_epi8(0x0F);
  };

  static void unpack(const Consts& k, const void* blk, __mmask32 words, __m512i* wv, __m512* ws) {
    const __m512i z = _mm512_maskz_loadu_epi16(words, blk);
    *wv = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(k.nib_words, z), k.nib_shift), k.low4);
    *ws = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(k.scale_words, z)));
  }

  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 32;
    const BlockQ4_0* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = reinterpret_cast<const BlockQ4_0*>(a.w + (r + i) * a.w_row_bytes);
    const ActQ8x64* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x64*>(a.xa + (t + j) * a.xa_stride);
    __m512 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    const Consts k;
    int64_t b = 0;
    for (; b + 2 <= n_blocks; b += 2) {
      __m512i wv[NR];
      __m512 ws[NR];
      for (int i = 0; i < NR; ++i) {
        prefetch_ahead(wr[i] + b);
        unpack(k, wr[i] + b, 0x3FFFF, &wv[i], &ws[i]);  // 18 words: two blocks
      }
      pair_step<NR, NT>(acc, wv, ws, xt, b / 2);
    }
    if (b < n_blocks) {  // odd block count: words 9..17 read as zero
      __m512i wv[NR];
      __m512 ws[NR];
      for (int i = 0; i < NR; ++i) unpack(k, wr[i] + b, 0x1FF, &wv[i], &ws[i]);
      pair_step<NR, NT>(acc, wv, ws, xt, b / 2);
    }
    store_acc16<NR, NT>(a, r, t, acc);
  }
};

// Q4_0 repacked in groups of 4 rows (repack.h): one 144-byte record per block
// pair holds the 4 rows' scales and nibbles. The nibbles need one masked shift
// and one mask (low nibbles: block 2p, high: block 2p + 1, the activations'
// order); the scales one conversion for the 4 rows and one permute per row. wv
// and ws hold the same values as KernelQ4_0's, and pair_step is shared, so
// every (row, token) gets the same bits as from GGUF rows.
struct KernelQ4_0x4 {
  template <int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_pairs = a.n_in / 64;
    const uint8_t* rec = a.w + r * a.w_row_bytes;  // group r / 4 starts at 4 rows' bytes each
    const ActQ8x64* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = reinterpret_cast<const ActQ8x64*>(a.xa + (t + j) * a.xa_stride);
    __m512 acc[4][NT];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i pick[4];  // row i's scales: [d(2p) x 8 | d(2p+1) x 8]
    for (int i = 0; i < 4; ++i) pick[i] = _mm512_inserti64x4(_mm512_set1_epi32(2 * i), _mm256_set1_epi32(2 * i + 1), 1);
    for (int64_t p = 0; p < n_pairs; ++p, rec += kQ4_0x4RecordBytes) {
      prefetch_ahead(rec);
      prefetch_ahead(rec + 64);
      prefetch_ahead(rec + 128);
      const __m512 sc = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec))));
      __m512i wv[4];
      __m512 ws[4];
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 + 32 * i)));
        wv[i] = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), low4);
        ws[i] = _mm512_permutexvar_ps(pick[i], sc);
      }
      pair_step<4, NT>(acc, wv, ws, xt, p);
    }
    store_acc16<4, NT>(a, r, t, acc);
  }
};

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
    const __m512i nib = _mm512_set1_epi8(0x0F);
    // vpshufb controls picking the int16 scale of sub-block 2c (low 256 bits) and
    // 2c+1 (high 256 bits) out of [sc0 .. sc7] repeated in every 128-bit lane.
    __m512i pick[4];
    for (int c = 0; c < 4; ++c) {
      const int lo = (4 * c) | ((4 * c + 1) << 8), hi = (4 * c + 2) | ((4 * c + 3) << 8);
      pick[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(lo))),
                                   _mm256_set1_epi16(static_cast<short>(hi)), 1);
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m512i sc[NR];   // [sc0..sc7] int16 in each 128-bit lane
      __m256i mins[NR]; // [m0 m0 m1 m1 .. m7 m7] int16
      float d[NR], dmin[NR];
      for (int i = 0; i < NR; ++i) {
        const BlockQ4_K& blk = wr[i][b];
        uint64_t sc_bytes = 0, m_bytes = 0;
        q4_k_scales_mins(blk.scales, &sc_bytes, &m_bytes);
        const __m128i s8 = _mm_cvtsi64_si128(static_cast<long long>(sc_bytes));
        const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(m_bytes));
        sc[i] = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(s8));
        const __m128i m16 = _mm_cvtepu8_epi16(m8);
        mins[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(m16, m16)),
                                          _mm_unpackhi_epi16(m16, m16), 1);
        d[i] = f16(blk.d);
        dmin[i] = f16(blk.dmin);
      }
      __m512i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        __m512i wv[NR], scv[NR];
        for (int i = 0; i < NR; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[i][b].qs + 32 * c));
          prefetch_ahead(wr[i][b].qs + 32 * c);
          wv[i] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), nib);
          scv[i] = _mm512_shuffle_epi8(sc[i], pick[c]);
        }
        for (int j = 0; j < NT; ++j) {
          const __m512i aq = _mm512_loadu_si512(xt[j][b].q + 64 * c);
          for (int i = 0; i < NR; ++i)
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wv[i], aq), scv[i]);
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum));
        for (int i = 0; i < NR; ++i) {
          const __m256 dot = _mm256_cvtepi32_ps(fold(isum[i][j]));
          const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, mins[i]));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
          acc[i][j] = _mm256_fnmadd_ps(msum, _mm256_set1_ps(dmin[i] * x.d), acc[i][j]);
        }
      }
    }
    for (int j = 0; j < NT; ++j)
      for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
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
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    // vpermw indices: 128-bit lane k of quarter p (64 elements) takes the scale of
    // sub-block 4p + k.
    const __m512i lane_k = _mm512_setr_epi32(0, 0, 0, 0, 0x10001, 0x10001, 0x10001, 0x10001, 0x20002, 0x20002,
                                             0x20002, 0x20002, 0x30003, 0x30003, 0x30003, 0x30003);
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i sc16[NR];  // [16] int16 scales
      float d[NR];
      for (int i = 0; i < NR; ++i) {
        sc16[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[i][b].scales)));
        d[i] = f16(wr[i][b].d);
      }
      __m512i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm512_setzero_si512();
      for (int h = 0; h < 2; ++h) {
        __m512i wa[NR], wb[NR], sa[NR], sb[NR];
        const __m512i idx_a = _mm512_add_epi16(lane_k, _mm512_set1_epi16(static_cast<short>(8 * h)));
        const __m512i idx_b = _mm512_add_epi16(lane_k, _mm512_set1_epi16(static_cast<short>(8 * h + 4)));
        for (int i = 0; i < NR; ++i) {
          const BlockQ6_K& blk = wr[i][b];
          prefetch_ahead(blk.ql + 64 * h);
          prefetch_ahead(blk.ql + 64 * h + 64);
          const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
          const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
          const __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(ql0), ql1, 1);
          const __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
          // elements 128h + 0..63 and 128h + 64..127 as 6-bit bytes
          wa[i] = _mm512_or_si512(_mm512_and_si512(lo, low4), _mm512_and_si512(_mm512_slli_epi16(hi, 4), bits45));
          wb[i] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo, 4), low4), _mm512_and_si512(hi, bits45));
          const __m512i s = _mm512_castsi256_si512(sc16[i]);
          sa[i] = _mm512_permutexvar_epi16(idx_a, s);
          sb[i] = _mm512_permutexvar_epi16(idx_b, s);
        }
        for (int j = 0; j < NT; ++j) {
          const __m512i qa = _mm512_loadu_si512(xt[j][b].q + 128 * h);
          const __m512i qb = _mm512_loadu_si512(xt[j][b].q + 128 * h + 64);
          for (int i = 0; i < NR; ++i) {
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wa[i], qa), sa[i]);
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(wb[i], qb), sb[i]);
          }
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum));
        for (int i = 0; i < NR; ++i) {
          const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsum, sc16[i]), 5);  // 32 * sc * qsum
          const __m256 dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(isum[i][j]), offset));
          acc[i][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[i] * x.d), acc[i][j]);
        }
      }
    }
    for (int j = 0; j < NT; ++j)
      for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
  }
};

}  // namespace

void quant_rows_q4_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ4_0>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

void quant_rows_q4_0x4_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                              int64_t r1) {
  CHECK(n_in % 64 == 0 && r0 % 4 == 0 && r1 % 4 == 0);
  rows_x4<KernelQ4_0x4>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride,
                             .y = y, .y_stride = y_stride},
                        n_tok, r0, r1);
}

void quant_rows_q4_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ4_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

void quant_rows_q6_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  rows<KernelQ6_K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

}  // namespace sluice::cpu
