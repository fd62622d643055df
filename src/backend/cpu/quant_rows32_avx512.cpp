// AVX-512 VNNI kernels for the types of quant_matmul_more.h, on the tiling
// driver of quant_tile_avx512.h (tiles of 4 rows x 4 tokens; one row at a time
// for decode). Compiled for AVX-512 only. u is the unsigned quant, q the int8
// activations; the integer sums equal the scalar kernels' exactly, only the
// float summation order differs.
//
// Blocks of 32 (ActQ8x64): one zmm holds two blocks (bytes 0..31 block b,
// 32..63 block b + 1), one group of the activations, so a (row, token) pair
// takes one vpdpbusd per 64 elements:
//   Q4_1, Q5_1  acc += cvt(dpbusd(0, u, q)) * d*ad + cvt(corr) * m*ad   (corr = +qsum)
//   Q5_0        acc += cvt(dpbusd(corr, u, q)) * d*ad                   (corr = -16 qsum)
//   IQ4_NL      v = vpshufb(codebook, nibble): acc += cvt(dpbusd(0, |v|, q negated
//               where v < 0)) * d*ad
//   An odd last block pairs with a zero scale and the activations' zero block.
//
// Super-blocks of 256 (ActQ8x256): per 64 elements (sub-blocks 2c and 2c + 1,
// four groups of 16), maddubs into int16 pairs, then vpdpwssd with the int16
// scale of each 16 (one vpermw picks them per 128-bit lane) into 16 int32 lanes
// for the super-block; folded to 8 lanes, then the per-type finish:
//   Q2_K, Q5_K  acc += cvt(isum) * d*ad - cvt(madd(bsum, mins)) * dmin*ad
//   Q3_K        acc += cvt(isum - 4 madd(bsum, sc)) * d*ad           (sc = scale - 32)
//   IQ4_XS      maddubs(|v|, q negated where v < 0); acc += cvt(isum) * d*ad
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul_more.h"
#include "backend/cpu/quant_tile_avx512.h"
#include "quant/blocks_more.h"

// GCC 12 reports the deliberately undefined upper lanes of the cast
// intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

__m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
__m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m512i halves(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 16 bytes of nibbles (Q4_0 layout) -> 32 bytes in element order, 0..15 each.
__m256i nibbles32(const uint8_t* qs) {
  const __m128i v = loadu128(qs);
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

// Signed codebook bytes -> their magnitudes, and the mask of the negative ones.
void split_sign(__m512i v, __m512i* magnitude, __mmask64* negative) {
  *negative = _mm512_movepi8_mask(v);
  *magnitude = _mm512_abs_epi8(v);
}

// q with the lanes of `negative` negated (|q| <= 127, so no overflow).
__m512i apply_sign(__m512i q, __mmask64 negative) {
  return _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
}

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
    const Block* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = weight_row<Block>(a, r + i);
    const ActQ8x64* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = act_row<ActQ8x64>(a, t + j);
    __m512 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
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
    *w = halves(nibbles32(b0.qs), nibbles32(b1.qs));
    *s = scale_pair(b0.d, b1.d, two);
    *m = scale_pair(b0.m, b1.m, two);
  }
};

struct TraitsQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false, kOffsetInCorr = false, kHasMin = true;
  static void load(const Block& b0, const Block& b1, bool two, __m512i, __m512i* w, __m512* s, __m512* m,
                   __mmask64*) {
    *w = _mm512_or_si512(halves(nibbles32(b0.qs), nibbles32(b1.qs)), fifth_bits(b0.qh, b1.qh));
    *s = scale_pair(b0.d, b1.d, two);
    *m = scale_pair(b0.m, b1.m, two);
  }
};

struct TraitsQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false, kOffsetInCorr = true, kHasMin = false;
  static void load(const Block& b0, const Block& b1, bool two, __m512i, __m512i* w, __m512* s, __m512*,
                   __mmask64*) {
    *w = _mm512_or_si512(halves(nibbles32(b0.qs), nibbles32(b1.qs)), fifth_bits(b0.qh, b1.qh));
    *s = scale_pair(b0.d, b1.d, two);
  }
};

struct TraitsIq4Nl {
  using Block = BlockIq4Nl;
  static constexpr bool kSigned = true, kOffsetInCorr = false, kHasMin = false;
  static void load(const Block& b0, const Block& b1, bool two, __m512i table, __m512i* w, __m512* s, __m512*,
                   __mmask64* neg) {
    split_sign(_mm512_shuffle_epi8(table, halves(nibbles32(b0.qs), nibbles32(b1.qs))), w, neg);
    *s = scale_pair(b0.d, b1.d, two);
  }
};

// ------------------------------------------------- super-blocks of 256 elements --

// What every 256-element tile keeps in registers: the vpermw index that puts
// the scale of 16-element group 4c + k in 128-bit lane k, the variable shifts
// the bit-plane types use, and the codebook.
struct Consts256 {
  __m512i group[4];
  __m512i table = _mm512_broadcast_i32x4(loadu128(kIq4NlValues));
  Consts256() {
    for (int c = 0; c < 4; ++c) {
      const int g = 4 * c;
      group[c] = _mm512_setr_epi32(g * 0x10001, g * 0x10001, g * 0x10001, g * 0x10001, (g + 1) * 0x10001,
                                   (g + 1) * 0x10001, (g + 1) * 0x10001, (g + 1) * 0x10001, (g + 2) * 0x10001,
                                   (g + 2) * 0x10001, (g + 2) * 0x10001, (g + 2) * 0x10001, (g + 3) * 0x10001,
                                   (g + 3) * 0x10001, (g + 3) * 0x10001, (g + 3) * 0x10001);
    }
  }
};

// [s0 x 16 words | s1 x 16 words]: per-half shift counts for vpsrlvw.
__m512i shifts(int s0, int s1) {
  return halves(_mm256_set1_epi16(static_cast<short>(s0)), _mm256_set1_epi16(static_cast<short>(s1)));
}

// 32 bytes at p in both halves, shifted right by s0 (low half) and s1 (high
// half), masked to `bits`: two bit planes of the same bytes side by side.
__m512i planes(const uint8_t* p, int s0, int s1, int bits) {
  const __m512i v = _mm512_broadcast_i64x4(loadu256(p));
  return _mm512_and_si512(_mm512_srlv_epi16(v, shifts(s0, s1)), _mm512_set1_epi8(static_cast<char>(bits)));
}

// Traits::prepare reads a super-block's scales (sc16: the int16 scale of each
// 16 elements); Traits::weights(c) gives elements 64c .. 64c + 63 as bytes in
// element order (magnitudes and a negative mask for the codebook type).
template <typename Traits>
struct Kernel256 {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    using Block = typename Traits::Block;
    const int64_t n_blocks = a.n_in / 256;
    const Block* wr[NR];
    for (int i = 0; i < NR; ++i) wr[i] = weight_row<Block>(a, r + i);
    const ActQ8x256* xt[NT];
    for (int j = 0; j < NT; ++j) xt[j] = act_row<ActQ8x256>(a, t + j);
    __m256 acc[NR][NT];
    for (int i = 0; i < NR; ++i)
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
    const Consts256 k;
    for (int64_t b = 0; b < n_blocks; ++b) {
      typename Traits::State st[NR];
      for (int i = 0; i < NR; ++i) Traits::prepare(wr[i][b], &st[i]);
      __m512i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        __m512i wv[NR], scv[NR];
        __mmask64 neg[NR];
        for (int i = 0; i < NR; ++i) {
          prefetch_ahead(reinterpret_cast<const uint8_t*>(&wr[i][b]) + 64 * c);
          Traits::weights(wr[i][b], k, c, &wv[i], &neg[i]);
          scv[i] = _mm512_permutexvar_epi16(k.group[c], _mm512_castsi256_si512(st[i].sc16));
        }
        for (int j = 0; j < NT; ++j) {
          const __m512i aq = _mm512_loadu_si512(xt[j][b].q + 64 * c);
          for (int i = 0; i < NR; ++i) {
            const __m512i p = Traits::kSigned ? _mm512_maddubs_epi16(wv[i], apply_sign(aq, neg[i]))
                                              : _mm512_maddubs_epi16(wv[i], aq);
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], p, scv[i]);
          }
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = loadu256(x.bsum);
        for (int i = 0; i < NR; ++i) Traits::finish(st[i], fold(isum[i][j]), bsum, x.d, &acc[i][j]);
      }
    }
    for (int j = 0; j < NT; ++j)
      for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
  }
};

// acc += cvt(isum) * d*ad - cvt(madd(bsum, mins)) * dmin*ad.
void finish_with_mins(__m256i isum, __m256i bsum, __m256i mins, float d, float dmin, float ad, __m256* acc) {
  const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, mins));
  *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * ad), *acc);
  *acc = _mm256_fnmadd_ps(msum, _mm256_set1_ps(dmin * ad), *acc);
}

struct TraitsQ2_K {
  using Block = BlockQ2_K;
  static constexpr bool kSigned = false;
  struct State {
    __m256i sc16;  // [16] 4-bit scales
    __m256i m16;   // [16] 4-bit mins
    float d, dmin;
  };
  static void prepare(const Block& b, State* s) {
    const __m128i raw = loadu128(b.scales);
    s->sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
    s->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    s->d = f16(b.d);
    s->dmin = f16(b.dmin);
  }
  // Sub-blocks 2c, 2c + 1: bit pairs 2j, 2j + 2 (j = 2 (c % 2)) of qs[32 (c / 2) + l].
  static void weights(const Block& b, const Consts256&, int c, __m512i* w, __mmask64*) {
    const int j = 2 * (c % 2);
    *w = planes(b.qs + 32 * (c / 2), 2 * j, 2 * j + 2, 3);
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    finish_with_mins(isum, bsum, s.m16, s.d, s.dmin, ad, acc);
  }
};

struct TraitsQ3_K {
  using Block = BlockQ3_K;
  static constexpr bool kSigned = false;
  struct State {
    __m256i sc16;  // [16] scales - 32
    float d;
  };
  static void prepare(const Block& b, State* s) {
    uint64_t lo = 0, hi = 0;
    q3_k_scales16(b.scales, &lo, &hi);
    const __m128i sc8 = _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)),
                                     _mm_set1_epi8(32));
    s->sc16 = _mm256_cvtepi8_epi16(sc8);
    s->d = f16(b.d);
  }
  // Sub-blocks 2c, 2c + 1: low bits as Q2_K's, high bits 2c, 2c + 1 of hmask[l]; u = q + 4.
  static void weights(const Block& b, const Consts256&, int c, __m512i* w, __mmask64*) {
    const int j = 2 * (c % 2);
    const __m512i low = planes(b.qs + 32 * (c / 2), 2 * j, 2 * j + 2, 3);
    const __m512i high = planes(b.hmask, 2 * c, 2 * c + 1, 1);
    *w = _mm512_or_si512(low, _mm512_slli_epi16(high, 2));
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    // sum (u - 4) q = sum u q - 4 qsum, per 16 times its scale.
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsum, s.sc16), 2);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, offset)), _mm256_set1_ps(s.d * ad), *acc);
  }
};

struct TraitsQ5_K {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false;
  struct State {
    __m256i sc16;  // [s0 s0 s1 s1 .. s7 s7] 6-bit scales per 16
    __m256i mins;  // [m0 m0 .. m7 m7]
    float d, dmin;
  };
  static void prepare(const Block& b, State* s) {
    uint64_t sc_bytes = 0, m_bytes = 0;
    q4_k_scales_mins(b.scales, &sc_bytes, &m_bytes);
    const __m128i s8 = _mm_cvtsi64_si128(static_cast<long long>(sc_bytes));
    const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(m_bytes));
    s->sc16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8));
    s->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    s->d = f16(b.d);
    s->dmin = f16(b.dmin);
  }
  // Sub-blocks 2c, 2c + 1: low and high nibbles of qs[32c + l], fifth bits 2c, 2c + 1 of qh[l].
  static void weights(const Block& b, const Consts256&, int c, __m512i* w, __mmask64*) {
    const __m512i low = planes(b.qs + 32 * c, 0, 4, 0x0F);
    const __m512i high = planes(b.qh, 2 * c, 2 * c + 1, 1);
    *w = _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    finish_with_mins(isum, bsum, s.mins, s.d, s.dmin, ad, acc);
  }
};

struct TraitsIq4Xs {
  using Block = BlockIq4Xs;
  static constexpr bool kSigned = true;
  struct State {
    __m256i sc16;  // [ls0 - 32 twice .. ls7 - 32 twice] per 16
    float d;
  };
  static void prepare(const Block& b, State* s) {
    const __m128i v = _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<long long>(iq4_xs_scales8(b))), _mm_set1_epi8(32));
    s->sc16 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
    s->d = f16(b.d);
  }
  // Sub-blocks 2c, 2c + 1 are qs[32c ..] and qs[32c + 16 ..], low nibbles then
  // high: 128-bit lanes [q0 | q0 >> 4 | q1 | q1 >> 4].
  static void weights(const Block& b, const Consts256& k, int c, __m512i* w, __mmask64* neg) {
    const __m512i v = _mm512_castsi256_si512(loadu256(b.qs + 32 * c));
    const __m512i lanes = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i idx = _mm512_and_si512(_mm512_mask_srli_epi16(lanes, 0xFF00FF00u, lanes, 4), _mm512_set1_epi8(0x0F));
    split_sign(_mm512_shuffle_epi8(k.table, idx), w, neg);
  }
  static void finish(const State& s, __m256i isum, __m256i, float ad, __m256* acc) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(s.d * ad), *acc);
  }
};

template <class K>
void run_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok,
              float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
               .y_stride = y_stride},
          n_tok, r0, r1);
}

}  // namespace

void quant_rows_q4_1_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel32<TraitsQ4_1>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q5_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel32<TraitsQ5_0>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q5_1_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel32<TraitsQ5_1>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_iq4_nl_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel32<TraitsIq4Nl>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q2_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel256<TraitsQ2_K>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q3_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel256<TraitsQ3_K>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q5_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                            int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel256<TraitsQ5_K>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_iq4_xs_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  run_rows<Kernel256<TraitsIq4Xs>>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

}  // namespace sluice::cpu
