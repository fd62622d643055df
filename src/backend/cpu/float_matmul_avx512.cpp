// AVX-512 kernels for F32 / F16 / BF16 weights (compiled with -mavx512*; only
// called when cpu_features() allows it) on the tiles and the driver of
// float_matmul_simd.h. Every helper has internal linkage.
//
// One (row, token) dot product is a 16-lane chain, summed in blocks of 256:
//
//   total = 0
//   for each block [kb, kb + 256) of the row:
//     acc = 0
//     for i in kb, kb + 16, ...:          acc = fma(w[i..i+16), x[i..i+16), acc)
//                                          (the row's last step loads w masked;
//                                           x is zero-padded by convert_act)
//     total = total + acc
//   y = hsum(total)                        fixed halving order
//
// (Short blocks keep the rounding chains short: at n_in = 11008, with |y| ~ 2,
// the largest error against float64 is ~5e-7.)
//
// A register tile of R rows x T tokens runs R*T of those chains side by side:
// each weight vector is loaded (and converted) once and feeds T tokens, each
// activation vector feeds R rows. Tiles change which chains run together, never
// the operations inside one chain, so results do not depend on the tiling.
//
//   GEMV (n_tok == 1): one row at a time, one sequential stream per thread. The
//                      blocks' fresh accumulators are independent, so out-of-
//                      order execution overlaps their FMA chains. Interleaving
//                      8 rows (8 streams one row apart) measured up to 2x
//                      slower at n_in = 768 (110m) and no faster at 2048 (1b):
//                      the hardware prefetcher follows one stream best.
//   GEMM:              tiles of 4 rows x 6 tokens (24 accumulators); tokens in
//                      blocks whose activations fit in L2, so a block of 4 rows
//                      is read from L1/L2 once per 6 tokens. The tiles read a
//                      block's activations packed, 6 tokens interleaved per
//                      vector (float_matmul_simd.h): one stream where 6 strided
//                      rows ran at 0.64-0.9x (F32), 0.8-0.95x (F16) and
//                      0.75-0.85x (BF16 on vdpbf16ps).
#include <immintrin.h>

#include <cstdint>
#include <limits>

// GCC 12 reports the deliberately undefined upper lanes inside <immintrin.h>
// helpers (_mm512_cvtph_ps, _mm512_extractf64x4_pd) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/float_matmul.h"
#include "backend/cpu/float_matmul_simd.h"
#include "backend/cpu/vec_math_avx512.h"

namespace sluice::cpu {
namespace {

// The level struct of float_matmul_simd.h.
struct Avx512 {
  using F = __m512;
  using Tail = __mmask16;  // the tail's lanes
  static constexpr int kLanes = 16;
  static constexpr bool kActFirst = false;
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 6;
  static constexpr int64_t kGemvMultiMinIn = std::numeric_limits<int64_t>::max();  // decode: one row a tile
  // Elements per partial sum: each chain sums kBlock elements into a fresh
  // accumulator, then adds it to a running total (shorter rounding chains).
  static constexpr int64_t kBlock = 256;
  // Target bytes of activations per token block (about half of L2).
  static constexpr int64_t kActBlockBytes = 512 * 1024;
  static constexpr int64_t kMinBlockTokens = kTileTokens;
  // A whole block's activations packed (float_matmul_simd.h), on the stack.
  static constexpr size_t kPackBytes = kActBlockBytes;

  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static float hsum(F v) { return avx512::hsum(v); }
  static Tail tail(int64_t k) { return static_cast<__mmask16>((1u << k) - 1u); }
};

// Weight loaders: 16 weights at element i of a row -> 16 floats.
struct LoadF32 {
  static __m512 full(const uint8_t* row, int64_t i) { return _mm512_loadu_ps(row + i * 4); }
  static __m512 tail(const uint8_t* row, int64_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + i * 4); }
};

struct LoadF16 {
  static __m512 full(const uint8_t* row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i * 2)));
  }
  static __m512 tail(const uint8_t* row, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + i * 2));
  }
};

struct LoadBF16 {
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 full(const uint8_t* row, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i * 2)));
  }
  static __m512 tail(const uint8_t* row, int64_t i, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, row + i * 2)); }
};

// Tile of R rows x T tokens, bf16 activations, vdpbf16ps (32 elements a step).
struct Bf16dpTile : ActTiles<Bf16dpTile> {
  static constexpr int kActElemBytes = 2;
  static constexpr int kActVecElems = 32;
  [[gnu::always_inline]] static __m512i load_act(const uint8_t* p) { return _mm512_loadu_si512(p); }

  template <int R, int T, class X>
  [[gnu::always_inline]] static inline void chains(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const X& x,
                                                   float* y, int64_t y_stride, int64_t r, int64_t t) {
    const uint8_t* wr[R];
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) acc[a][b] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n_in; i += 32) step(wr, x, i, acc, [](const uint8_t* p) { return _mm512_loadu_si512(p); });
    if (i < n_in) {
      const __mmask32 m = static_cast<__mmask32>((1u << (n_in - i)) - 1u);
      step(wr, x, i, acc, [m](const uint8_t* p) { return _mm512_maskz_loadu_epi16(m, p); });
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) y[(t + b) * y_stride + r + a] = avx512::hsum(acc[a][b]);
  }

  // 32 elements at i of R rows (loaded by load) x T tokens.
  template <int R, int T, class X, class Load>
  [[gnu::always_inline]] static inline void step(const uint8_t* const (&wr)[R], const X& x, int64_t i,
                                                 __m512 (&acc)[R][T], Load load) {
    __m512i wv[R];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wv[a] = load(wr[a] + static_cast<size_t>(i) * 2);
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) {
      const __m512i xv = x.at(b, i);
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)wv[a], (__m512bh)xv);
    }
  }
};

}  // namespace

RowsFn* const float_rows_f32_avx512 = float_rows<Avx512, F32Tile<Avx512, LoadF32>, float_act_row_bytes_f32>;
RowsFn* const float_rows_f16_avx512 = float_rows<Avx512, F32Tile<Avx512, LoadF16>, float_act_row_bytes_f32>;
RowsFn* const float_rows_bf16_avx512 = float_rows<Avx512, F32Tile<Avx512, LoadBF16>, float_act_row_bytes_f32>;
RowsFn* const float_rows_bf16dp_avx512 = float_rows<Avx512, Bf16dpTile, float_act_row_bytes_bf16>;

}  // namespace sluice::cpu
