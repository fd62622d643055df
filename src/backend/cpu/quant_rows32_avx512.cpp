// AVX-512 VNNI kernels for the types on blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL; Q8_0 is in quant_rows32_x16_avx512.cpp), on the tiling driver of
// quant_tile_avx512.h (tiles of 4 rows x 4 tokens; one row at a time for
// decode): one tile template per type over NR rows x NT tokens, so a (row,
// token) pair goes through the same instructions in any tile and y does not
// depend on n_tok or the row split. Compiled for AVX-512 only: everything here
// has internal linkage except the quant_rows_*_avx512 functions. u is the
// unsigned quant, q the int8 activations; the integer sums equal the scalar
// kernels' exactly, only the float summation order differs.
//
// One zmm holds two blocks (bytes 0..31 block b, 32..63 block b + 1), one group
// of the ActQ8x64 activations, so a (row, token) pair takes one vpdpbusd per
// 64 elements:
//   Q4_0        weights as unsigned bytes (the nibbles = w + 8); vpdpbusd starts
//               from ActQ8x64::corr, so each int32 lane ends at the exact signed
//               dot of its 4 bytes; then acc[16 f32] += cvt(lane) * (wd * ad)
//   Q4_1, Q5_1  acc += cvt(dpbusd(0, u, q)) * d*ad + cvt(corr) * m*ad   (corr = +qsum)
//   Q5_0        acc += cvt(dpbusd(corr, u, q)) * d*ad                   (corr = -16 qsum)
//   IQ4_NL      v = vpshufb(codebook, nibble): acc += cvt(dpbusd(0, |v|, q negated
//               where v < 0)) * d*ad
//   An odd last block pairs with a zero scale and the activations' zero block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx512.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks_more.h"

// GCC 12 reports the deliberately undefined upper lanes of the cast
// intrinsics as uninitialized.
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
    const auto [wr, xt] = tile_rows<BlockQ4_0, ActQ8x64, NR, NT>(a, r, t);
    __m512 acc[NR][NT];
    fill(acc, _mm512_setzero_ps());
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
    for (int j = 0; j < NT; ++j) xt[j] = act_row<ActQ8x64>(a, t + j);
    __m512 acc[4][NT];
    fill(acc, _mm512_setzero_ps());
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

// ------------------------------------------------------- blocks of 32 elements --

// Traits::load(b0, b1, two, table, ...) gives blocks b0 and b1 as 64 weight
// bytes in element order, [d0 x 8 | d1 x 8] (and the same of m), and for the
// codebook type the mask of negative weights. When !two, b1 == b0 and its
// scales are zero.
template <typename Traits>
struct Kernel32 {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    using Block = typename Traits::Block;
    const int64_t n_blocks = a.n_in / 32;
    const auto [wr, xt] = tile_rows<Block, ActQ8x64, NR, NT>(a, r, t);
    __m512 acc[NR][NT];
    fill(acc, _mm512_setzero_ps());
    const __m512i table = _mm512_broadcast_i32x4(loadu128(kIq4NlValues));
    for (int64_t b = 0; b < n_blocks; b += 2) {
      const bool two = b + 1 < n_blocks;
      __m512i wv[NR];
      __m512 ws[NR], wm[NR];
      __mmask64 neg[NR];
      for (int i = 0; i < NR; ++i) {
        prefetch_ahead(wr[i] + b);
        Traits::load(wr[i][b], wr[i][two ? b + 1 : b], two, table, &wv[i], &ws[i], &wm[i], &neg[i]);
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x64& x = xt[j][b / 2];
        const __m512i aq = _mm512_loadu_si512(x.q);
        const __m512 ad = _mm512_loadu_ps(x.d);
        const __m512i corr = _mm512_loadu_si512(x.corr);
        for (int i = 0; i < NR; ++i) {
          __m512i lanes;
          if constexpr (Traits::kSigned) {
            lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[i], apply_sign(aq, neg[i]));
          } else {
            lanes = _mm512_dpbusd_epi32(Traits::kOffsetInCorr ? corr : _mm512_setzero_si512(), wv[i], aq);
          }
          acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(ws[i], ad), acc[i][j]);
          if constexpr (Traits::kHasMin)
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_mul_ps(wm[i], ad), acc[i][j]);
        }
      }
    }
    store_acc16<NR, NT>(a, r, t, acc);
  }
};

// [s0 x 8 | s1 x 8], s1 taken as zero when the pair has one block.
__m512 scale_pair(uint16_t h0, uint16_t h1, bool two) {
  return _mm512_insertf32x8(_mm512_set1_ps(f16(h0)), _mm256_set1_ps(two ? f16(h1) : 0.0f), 1);
}

// Bytes 0x10 where bit i of the 64 fifth bits (qh of b0, then of b1) is set.
__m512i fifth_bits(const uint8_t* qh0, const uint8_t* qh1) {
  uint32_t lo, hi;
  std::memcpy(&lo, qh0, 4);
  std::memcpy(&hi, qh1, 4);
  return _mm512_maskz_mov_epi8(lo | static_cast<uint64_t>(hi) << 32, _mm512_set1_epi8(0x10));
}

struct TraitsQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false, kOffsetInCorr = false, kHasMin = true;
  static void load(const Block& b0, const Block& b1, bool two, __m512i, __m512i* w, __m512* s, __m512* m,
                   __mmask64*) {
    *w = halves(unpack_nibbles(b0.qs), unpack_nibbles(b1.qs));
    *s = scale_pair(b0.d, b1.d, two);
    *m = scale_pair(b0.m, b1.m, two);
  }
};

struct TraitsQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false, kOffsetInCorr = false, kHasMin = true;
  static void load(const Block& b0, const Block& b1, bool two, __m512i, __m512i* w, __m512* s, __m512* m,
                   __mmask64*) {
    *w = _mm512_or_si512(halves(unpack_nibbles(b0.qs), unpack_nibbles(b1.qs)), fifth_bits(b0.qh, b1.qh));
    *s = scale_pair(b0.d, b1.d, two);
    *m = scale_pair(b0.m, b1.m, two);
  }
};

struct TraitsQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false, kOffsetInCorr = true, kHasMin = false;
  static void load(const Block& b0, const Block& b1, bool two, __m512i, __m512i* w, __m512* s, __m512*,
                   __mmask64*) {
    *w = _mm512_or_si512(halves(unpack_nibbles(b0.qs), unpack_nibbles(b1.qs)), fifth_bits(b0.qh, b1.qh));
    *s = scale_pair(b0.d, b1.d, two);
  }
};

struct TraitsIq4Nl {
  using Block = BlockIq4Nl;
  static constexpr bool kSigned = true, kOffsetInCorr = false, kHasMin = false;
  static void load(const Block& b0, const Block& b1, bool two, __m512i table, __m512i* w, __m512* s, __m512*,
                   __mmask64* neg) {
    split_sign(_mm512_shuffle_epi8(table, halves(unpack_nibbles(b0.qs), unpack_nibbles(b1.qs))), w, neg);
    *s = scale_pair(b0.d, b1.d, two);
  }
};

// rows() of a matrix repacked to Q4_0x4.
void rows_q4_0x4(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                 int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  CHECK(n_in % 64 == 0 && r0 % 4 == 0 && r1 % 4 == 0);
  rows_x4<KernelQ4_0x4>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride,
                             .y = y, .y_stride = y_stride},
                        n_tok, r0, r1);
}

}  // namespace

const QuantRowsFn quant_rows_q4_0_avx512 = run_rows<KernelQ4_0>;
const QuantRowsFn quant_rows_q4_0x4_avx512 = rows_q4_0x4;
const QuantRowsFn quant_rows_q4_1_avx512 = run_rows<Kernel32<TraitsQ4_1>>;
const QuantRowsFn quant_rows_q5_0_avx512 = run_rows<Kernel32<TraitsQ5_0>>;
const QuantRowsFn quant_rows_q5_1_avx512 = run_rows<Kernel32<TraitsQ5_1>>;
const QuantRowsFn quant_rows_iq4_nl_avx512 = run_rows<Kernel32<TraitsIq4Nl>>;

}  // namespace sluice::cpu
