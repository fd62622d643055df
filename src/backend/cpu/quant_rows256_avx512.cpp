// AVX-512 VNNI kernels for the types on super-blocks of 256 x ActQ8x256
// activations: Q4_K and Q6_K each with a kernel of its own, Q2_K, Q3_K, Q5_K
// and IQ4_XS on one kernel over per-type traits (Kernel256).
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
//   Q4_K         per 64 elements (sub-blocks 2c | 2c+1): maddubs, then vpdpwssd
//                with the 6-bit scales into 16 int32 lanes for the super-block;
//                folded to 8 lanes; acc[8 f32] += cvt * d*ad, -= cvt(mins) * dmin*ad.
//   Q6_K         per 64 elements (4 sub-blocks of 16): maddubs, vpdpwssd with the
//                int8 scales; folded to 8 lanes minus 32 * sum(sc * qsum);
//                acc[8 f32] += cvt * d*ad.
//   Q2_K, Q3_K, Q5_K, IQ4_XS  per 64 elements (sub-blocks 2c and 2c + 1, four
//                groups of 16), maddubs into int16 pairs, then vpdpwssd with the
//                int16 scale of each 16 (one vpermw picks them per 128-bit lane)
//                into 16 int32 lanes for the super-block; folded to 8 lanes, then
//                the per-type finish:
//     Q2_K, Q5_K  acc += cvt(isum) * d*ad - cvt(madd(bsum, mins)) * dmin*ad
//     Q3_K        acc += cvt(isum - 4 madd(bsum, sc)) * d*ad           (sc = scale - 32)
//     IQ4_XS      maddubs(|v|, q negated where v < 0); acc += cvt(isum) * d*ad
// The integer sums equal the scalar kernels' exactly; only float order differs.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx512.h"
#include "quant/blocks_more.h"

// GCC 12 reports the deliberately undefined lanes inside <immintrin.h> helpers
// as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sluice::cpu {
namespace {

// ------------------------------------------------------------------------ Q4_K --

struct KernelQ4_K {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    const int64_t n_blocks = a.n_in / 256;
    const auto [wr, xt] = tile_rows<BlockQ4_K, ActQ8x256, NR, NT>(a, r, t);
    __m256 acc[NR][NT];
    fill(acc, _mm256_setzero_ps());
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
        for (int i = 0; i < NR; ++i) finish_with_mins(fold(isum[i][j]), bsum, mins[i], d[i], dmin[i], x.d, &acc[i][j]);
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
    const auto [wr, xt] = tile_rows<BlockQ6_K, ActQ8x256, NR, NT>(a, r, t);
    __m256 acc[NR][NT];
    fill(acc, _mm256_setzero_ps());
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
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

// ---------------------------------------------- Q2_K, Q3_K, Q5_K, IQ4_XS --

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
    const auto [wr, xt] = tile_rows<Block, ActQ8x256, NR, NT>(a, r, t);
    __m256 acc[NR][NT];
    fill(acc, _mm256_setzero_ps());
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
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

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

}  // namespace

const QuantRowsFn quant_rows_q4_k_avx512 = run_rows<KernelQ4_K>;
const QuantRowsFn quant_rows_q6_k_avx512 = run_rows<KernelQ6_K>;
const QuantRowsFn quant_rows_q2_k_avx512 = run_rows<Kernel256<TraitsQ2_K>>;
const QuantRowsFn quant_rows_q3_k_avx512 = run_rows<Kernel256<TraitsQ3_K>>;
const QuantRowsFn quant_rows_q5_k_avx512 = run_rows<Kernel256<TraitsQ5_K>>;
const QuantRowsFn quant_rows_iq4_xs_avx512 = run_rows<Kernel256<TraitsIq4Xs>>;

}  // namespace sluice::cpu
