// AVX2 kernels for Q4_1, Q5_0, Q5_1 and IQ4_NL (blocks of 32; Q8_0 and Q4_0 are
// in quant_rows32_x8_avx2.cpp), on the tiling driver of quant_tile_avx2.h
// (tiles of rows x tokens; one row at a time for decode). Compiled for AVX2
// only. Per 32 elements, with u the unsigned quant and q the int8 activations,
// maddubs(u, q) + madd give 8 int32 lanes:
//
//   Q4_1, Q5_1  acc += cvt(sum u*q) * d*ad + cvt(corr) * m*ad     (corr = +qsum, offset -1)
//   Q5_0        acc += cvt(sum u*q + corr) * d*ad                 (corr = -16 qsum)
//   IQ4_NL      v = pshufb(codebook, nibble) signed: maddubs(|v|, sign(q, v));
//               acc += cvt(lanes) * d*ad
// The integer sums equal the scalar kernels' exactly; only float order differs.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile_avx2.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// 32 bits (LE bytes qh[0..3]) -> 32 bytes, byte i = 0x10 if bit i is set, else 0.
__m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);  // byte i = qh[i / 8]
  const __m256i sel = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));       // 1 << (i % 8)
  const __m256i hit = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, sel), sel);
  return _mm256_and_si256(hit, _mm256_set1_epi8(0x10));
}

// ------------------------------------------------------- blocks of 32 elements --

// One kernel for Q4_1, Q5_0, Q5_1, IQ4_NL: Traits::load gives the block's 32
// weight bytes in element order and its scale (and offset).
template <typename Traits>
struct Kernel32 {
  template <int NR, int NT>
  static void tile(const Args& a, int64_t r, int64_t t) {
    using Block = typename Traits::Block;
    const int64_t n_blocks = a.n_in / 32;
    const auto [wr, xt] = tile_rows<Block, ActQ8x64, NR, NT>(a, r, t);
    __m256 acc[NR][NT];
    fill(acc, _mm256_setzero_ps());
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i table = codebook();
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i wv[NR];
      __m256 ws[NR], wm[NR];
      for (int i = 0; i < NR; ++i) Traits::load(wr[i][b], table, &wv[i], &ws[i], &wm[i]);
      for (int j = 0; j < NT; ++j) {
        const ActQ8x64& x = xt[j][b / 2];
        const int h = static_cast<int>(b % 2);
        const __m256i aq = loadu256(x.q + 32 * h);
        const __m256 ad = _mm256_loadu_ps(x.d + 8 * h);
        const __m256i corr = loadu256(x.corr + 8 * h);
        for (int i = 0; i < NR; ++i) {
          __m256i dot;
          if constexpr (Traits::kSigned) {
            dot = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv[i]), _mm256_sign_epi8(aq, wv[i])), ones);
          } else {
            dot = _mm256_madd_epi16(_mm256_maddubs_epi16(wv[i], aq), ones);
          }
          if constexpr (Traits::kOffsetInCorr) dot = _mm256_add_epi32(dot, corr);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws[i], ad), acc[i][j]);
          if constexpr (Traits::kHasMin)
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(wm[i], ad), acc[i][j]);
        }
      }
    }
    store_acc8<NR, NT>(a, r, t, acc);
  }
};

struct TraitsQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false, kOffsetInCorr = false, kHasMin = true;
  static void load(const Block& b, __m256i, __m256i* w, __m256* s, __m256* m) {
    *w = unpack_nibbles(b.qs);
    *s = _mm256_set1_ps(f16(b.d));
    *m = _mm256_set1_ps(f16(b.m));
  }
};

struct TraitsQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false, kOffsetInCorr = false, kHasMin = true;
  static void load(const Block& b, __m256i, __m256i* w, __m256* s, __m256* m) {
    *w = _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh));
    *s = _mm256_set1_ps(f16(b.d));
    *m = _mm256_set1_ps(f16(b.m));
  }
};

struct TraitsQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false, kOffsetInCorr = true, kHasMin = false;
  static void load(const Block& b, __m256i, __m256i* w, __m256* s, __m256*) {
    *w = _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh));
    *s = _mm256_set1_ps(f16(b.d));
  }
};

struct TraitsIq4Nl {
  using Block = BlockIq4Nl;
  static constexpr bool kSigned = true, kOffsetInCorr = false, kHasMin = false;
  static void load(const Block& b, __m256i table, __m256i* w, __m256* s, __m256*) {
    *w = _mm256_shuffle_epi8(table, unpack_nibbles(b.qs));
    *s = _mm256_set1_ps(f16(b.d));
  }
};

}  // namespace

const QuantRowsFn quant_rows_q4_1_avx2 = run_rows<Kernel32<TraitsQ4_1>>;
const QuantRowsFn quant_rows_q5_0_avx2 = run_rows<Kernel32<TraitsQ5_0>>;
const QuantRowsFn quant_rows_q5_1_avx2 = run_rows<Kernel32<TraitsQ5_1>>;
const QuantRowsFn quant_rows_iq4_nl_avx2 = run_rows<Kernel32<TraitsIq4Nl>>;

}  // namespace sluice::cpu
