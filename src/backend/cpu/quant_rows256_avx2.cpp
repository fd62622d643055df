// AVX2 kernels for the types on super-blocks of 256 x ActQ8x256 activations:
// Q4_K and Q6_K each with a kernel of its own, Q2_K, Q3_K, Q5_K and IQ4_XS on
// one kernel over per-type traits (Kernel256).
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
//   Q2_K  isum += madd(maddubs(u, q), sc per 16); msum = madd(bsum, m);
//         acc += cvt(isum) * d*ad - cvt(msum) * dmin*ad     (per super-block)
//   Q3_K  isum += madd(maddubs(u, q), sc - 32) - 4 madd(bsum, sc - 32)
//   Q5_K  as Q4_K with the fifth bit or-ed in
//   IQ4_XS  isum += madd(maddubs(|v|, sign(q, v)), ls - 32), v = pshufb(codebook, nibble)
// The integer sums equal the scalar kernels' exactly; only float order differs.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx2.h"
#include "base/check.h"
#include "quant/blocks_more.h"

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
        for (int i = 0; i < NR; ++i) finish_with_mins(isum[i][j], bsum, mins[i], d[i], dmin[i], x.d, &acc[i][j]);
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

// ---------------------------------------------- Q2_K, Q3_K, Q5_K, IQ4_XS --

// Per-row state of one super-block and the 32-element weight vectors of it.
// Traits::prepare reads scales; Traits::weights(k) gives elements 32k .. 32k+31
// as bytes (signed for the codebook types) and their per-16 int16 scales.
template <typename Traits>
struct Kernel256 {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    using Block = typename Traits::Block;
    const int64_t n_blocks = a.n_in / 256;
    const auto [wr, xt] = tile_rows<Block, ActQ8x256, NR, NT>(a, r, t);
    __m256 acc[NR][NT];
    fill(acc, _mm256_setzero_ps());
    const __m256i table = codebook();
    for (int64_t b = 0; b < n_blocks; ++b) {
      typename Traits::State st[NR];
      for (int i = 0; i < NR; ++i) Traits::prepare(wr[i][b], &st[i]);
      __m256i isum[NR][NT];
      for (int i = 0; i < NR; ++i)
        for (int j = 0; j < NT; ++j) isum[i][j] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        __m256i wv[NR], scv[NR];
        for (int i = 0; i < NR; ++i) Traits::weights(wr[i][b], st[i], table, k, &wv[i], &scv[i]);
        for (int j = 0; j < NT; ++j) {
          const __m256i aq = loadu256(xt[j][b].q + 32 * k);
          for (int i = 0; i < NR; ++i) {
            const __m256i p = Traits::kSigned
                                  ? _mm256_maddubs_epi16(_mm256_abs_epi8(wv[i]), _mm256_sign_epi8(aq, wv[i]))
                                  : _mm256_maddubs_epi16(wv[i], aq);
            isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(p, scv[i]));
          }
        }
      }
      for (int j = 0; j < NT; ++j) {
        const ActQ8x256& x = xt[j][b];
        const __m256i bsum = loadu256(x.bsum);
        for (int i = 0; i < NR; ++i) Traits::finish(st[i], isum[i][j], bsum, x.d, &acc[i][j]);
      }
    }
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

// [scale of sub-block s0 x 8 | scale of s1 x 8] int16 from 16 int8 scales.
__m256i pick_pair(__m128i sc8, int s0, int s1) {
  const __m128i pick = _mm_set_epi64x(s1 * 0x0101010101010101LL, s0 * 0x0101010101010101LL);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
}

struct TraitsQ2_K {
  using Block = BlockQ2_K;
  static constexpr bool kSigned = false;
  struct State {
    __m128i sc8;   // [16] 4-bit scales
    __m256i m16;   // [16] 4-bit mins as int16
    float d, dmin;
  };
  static void prepare(const Block& b, State* s) {
    const __m128i raw = loadu128(b.scales);
    s->sc8 = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
    s->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    s->d = f16(b.d);
    s->dmin = f16(b.dmin);
  }
  // Elements 32k ..: h = k / 4, j = k % 4: bits 2j of qs[32h + l]; sub-blocks 2k, 2k + 1.
  static void weights(const Block& b, const State& s, __m256i, int k, __m256i* w, __m256i* sc) {
    const __m256i v = loadu256(b.qs + 32 * (k / 4));
    *w = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (k % 4))), _mm256_set1_epi8(3));
    *sc = pick_pair(s.sc8, 2 * k, 2 * k + 1);
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    finish_with_mins(isum, bsum, s.m16, s.d, s.dmin, ad, acc);
  }
};

struct TraitsQ3_K {
  using Block = BlockQ3_K;
  static constexpr bool kSigned = false;
  struct State {
    __m128i sc8;   // [16] scales - 32, int8
    __m256i sc16;  // the same as int16
    float d;
  };
  static void prepare(const Block& b, State* s) {
    uint64_t lo = 0, hi = 0;
    q3_k_scales16(b.scales, &lo, &hi);
    s->sc8 = _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)), _mm_set1_epi8(32));
    s->sc16 = _mm256_cvtepi8_epi16(s->sc8);
    s->d = f16(b.d);
  }
  // Elements 32k ..: h = k / 4, j = k % 4: low bits 2j of qs[32h + l], bit 4h + j of hmask[l].
  static void weights(const Block& b, const State& s, __m256i, int k, __m256i* w, __m256i* sc) {
    const int h = k / 4, j = k % 4;
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(loadu256(b.qs + 32 * h), _mm_cvtsi32_si128(2 * j)),
                                         _mm256_set1_epi8(3));
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(loadu256(b.hmask), _mm_cvtsi32_si128(4 * h + j)),
                                          _mm256_set1_epi8(1));
    *w = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));  // u = q + 4 in 0..7
    *sc = pick_pair(s.sc8, 2 * k, 2 * k + 1);
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    // sum (u - 4) q = sum u q - 4 qsum, per sub-block times its scale.
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsum, s.sc16), 2);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, offset)), _mm256_set1_ps(s.d * ad), *acc);
  }
};

struct TraitsQ5_K {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false;
  struct State {
    __m128i sc8;   // [8] 6-bit scales, each twice: s, s (for pick_pair's per-16 halves)
    __m256i mins;  // [m0 m0 m1 m1 .. m7 m7] int16, against bsum per 16
    float d, dmin;
  };
  // q4_k_scale_min() for all 8 at once, as KernelQ4_K decodes them.
  static void prepare(const Block& b, State* s) {
    uint64_t sc_bytes = 0, m_bytes = 0;
    q4_k_scales_mins(b.scales, &sc_bytes, &m_bytes);
    const __m128i s8 = _mm_cvtsi64_si128(static_cast<long long>(sc_bytes));
    const __m128i m8 = _mm_cvtsi64_si128(static_cast<long long>(m_bytes));
    s->sc8 = _mm_unpacklo_epi8(s8, s8);
    s->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    s->d = f16(b.d);
    s->dmin = f16(b.dmin);
  }
  // Sub-block k: nibble half k % 2 of qs[32 (k / 2) + l], fifth bit = bit k of qh[l].
  static void weights(const Block& b, const State& s, __m256i, int k, __m256i* w, __m256i* sc) {
    const __m256i v = loadu256(b.qs + 32 * (k / 2));
    const __m256i low = _mm256_and_si256(k % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(loadu256(b.qh), _mm_cvtsi32_si128(k)), _mm256_set1_epi8(1));
    *w = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
    *sc = pick_pair(s.sc8, 2 * k, 2 * k + 1);
  }
  static void finish(const State& s, __m256i isum, __m256i bsum, float ad, __m256* acc) {
    finish_with_mins(isum, bsum, s.mins, s.d, s.dmin, ad, acc);
  }
};

struct TraitsIq4Xs {
  using Block = BlockIq4Xs;
  static constexpr bool kSigned = true;
  struct State {
    __m128i sc8;  // [16] ls - 32 per 16 elements (each sub-block's twice)
    float d;
  };
  static void prepare(const Block& b, State* s) {
    const __m128i v = _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<long long>(iq4_xs_scales8(b))), _mm_set1_epi8(32));
    s->sc8 = _mm_unpacklo_epi8(v, v);
    s->d = f16(b.d);
  }
  static void weights(const Block& b, const State& s, __m256i table, int k, __m256i* w, __m256i* sc) {
    *w = _mm256_shuffle_epi8(table, unpack_nibbles(b.qs + 16 * k));
    *sc = pick_pair(s.sc8, 2 * k, 2 * k + 1);
  }
  static void finish(const State& s, __m256i isum, __m256i, float ad, __m256* acc) {
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(s.d * ad), *acc);
  }
};

}  // namespace

const QuantRowsFn quant_rows_q4_k_avx2 = run_rows<KernelQ4_K>;
const QuantRowsFn quant_rows_q6_k_avx2 = run_rows<KernelQ6_K>;
const QuantRowsFn quant_rows_q2_k_avx2 = run_rows<Kernel256<TraitsQ2_K>>;
const QuantRowsFn quant_rows_q3_k_avx2 = run_rows<Kernel256<TraitsQ3_K>>;
const QuantRowsFn quant_rows_q5_k_avx2 = run_rows<Kernel256<TraitsQ5_K>>;
const QuantRowsFn quant_rows_iq4_xs_avx2 = run_rows<Kernel256<TraitsIq4Xs>>;

}  // namespace sluice::cpu
