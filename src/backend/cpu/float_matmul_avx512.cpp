// AVX-512 kernels for F32 / F16 / BF16 weights (compiled with -mavx512*; only
// called when cpu_features() allows it). Every helper has internal linkage.
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
//                      is read from L1/L2 once per 6 tokens.
#include <immintrin.h>

// GCC 12 reports the deliberately undefined upper lanes inside <immintrin.h>
// helpers (_mm512_cvtph_ps, _mm512_extractf64x4_pd) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/float_matmul.h"
#include "backend/cpu/vec_math_avx512.h"

namespace sluice::cpu {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileTokens = 6;
// Elements per partial sum: each chain sums kBlock elements into a fresh
// accumulator, then adds it to a running total (shorter rounding chains).
constexpr int64_t kBlock = 256;
// Target bytes of activations per token block (about half of L2).
constexpr int64_t kActBlockBytes = 512 * 1024;

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

using avx512::hsum;

// Tile of R rows starting at r x T tokens starting at t, f32 activations.
template <class Load, int R, int T>
void tile_f32(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
              int64_t y_stride, int64_t r, int64_t t) {
  const uint8_t* wr[R];
  const float* xt[T];
  __m512 acc[R][T], total[R][T];
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
#pragma GCC unroll 8
  for (int b = 0; b < T; ++b) xt[b] = reinterpret_cast<const float*>(xa + static_cast<size_t>(t + b) * xa_stride);
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) total[a][b] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < n_in; kb += kBlock) {
    const int64_t kend = kb + kBlock < n_in ? kb + kBlock : n_in;
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) acc[a][b] = _mm512_setzero_ps();
    int64_t i = kb;
    for (; i + 16 <= kend; i += 16) {
      __m512 wv[R];
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) wv[a] = Load::full(wr[a], i);
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) {
        const __m512 xv = _mm512_loadu_ps(xt[b] + i);
#pragma GCC unroll 8
        for (int a = 0; a < R; ++a) acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
      }
    }
    if (i < kend) {
      const __mmask16 m = static_cast<__mmask16>((1u << (kend - i)) - 1u);
      __m512 wv[R];
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) wv[a] = Load::tail(wr[a], i, m);
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) {
        const __m512 xv = _mm512_loadu_ps(xt[b] + i);
#pragma GCC unroll 8
        for (int a = 0; a < R; ++a) acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) total[a][b] = _mm512_add_ps(total[a][b], acc[a][b]);
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) y[(t + b) * y_stride + r + a] = hsum(total[a][b]);
}

// Tile of R rows x T tokens, bf16 activations, vdpbf16ps (32 elements a step).
template <int R, int T>
void tile_bf16dp(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                 float* y, int64_t y_stride, int64_t r, int64_t t) {
  const uint8_t* wr[R];
  const uint8_t* xt[T];
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
#pragma GCC unroll 8
  for (int b = 0; b < T; ++b) xt[b] = xa + static_cast<size_t>(t + b) * xa_stride;
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) acc[a][b] = _mm512_setzero_ps();

  int64_t i = 0;
  for (; i + 32 <= n_in; i += 32) {
    __m512i wv[R];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wv[a] = _mm512_loadu_si512(wr[a] + i * 2);
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) {
      const __m512i xv = _mm512_loadu_si512(xt[b] + i * 2);
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)wv[a], (__m512bh)xv);
    }
  }
  if (i < n_in) {
    const __mmask32 m = static_cast<__mmask32>((1u << (n_in - i)) - 1u);
    __m512i wv[R];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wv[a] = _mm512_maskz_loadu_epi16(m, wr[a] + i * 2);
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) {
      const __m512i xv = _mm512_loadu_si512(xt[b] + i * 2);
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)wv[a], (__m512bh)xv);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) y[(t + b) * y_stride + r + a] = hsum(acc[a][b]);
}

// A tile function for R rows and T tokens.
using TileFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, size_t, float*, int64_t, int64_t, int64_t);

// Tiles indexed by token count 1..kTileTokens, for one row count.
struct TileSet {
  TileFn by_tokens[kTileTokens + 1];
};

template <class Load, int R>
constexpr TileSet f32_tiles() {
  return TileSet{{nullptr, tile_f32<Load, R, 1>, tile_f32<Load, R, 2>, tile_f32<Load, R, 3>, tile_f32<Load, R, 4>,
                  tile_f32<Load, R, 5>, tile_f32<Load, R, 6>}};
}

template <int R>
constexpr TileSet bf16dp_tiles() {
  return TileSet{{nullptr, tile_bf16dp<R, 1>, tile_bf16dp<R, 2>, tile_bf16dp<R, 3>, tile_bf16dp<R, 4>,
                  tile_bf16dp<R, 5>, tile_bf16dp<R, 6>}};
}

// Runs every token of [t0, t1) through tiles of one row count starting at row r.
void sweep_tokens(const TileSet& set, const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                  size_t xa_stride, float* y, int64_t y_stride, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + kTileTokens <= t1; t += kTileTokens)
    set.by_tokens[kTileTokens](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
  if (t < t1) set.by_tokens[t1 - t](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
}

// Runs the tiles over rows [r0, r1) x all tokens.
//   multi: 4-row tiles;  single: 1-row tiles (also the GEMV).
void drive(const TileSet& multi, const TileSet& single, size_t act_bytes_per_token,
           const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok,
           float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  if (n_tok == 1) {
    for (int64_t r = r0; r < r1; ++r) single.by_tokens[1](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, 0);
    return;
  }
  int64_t block = kActBlockBytes / static_cast<int64_t>(act_bytes_per_token);
  block = block < kTileTokens ? kTileTokens : block / kTileTokens * kTileTokens;
  for (int64_t tb = 0; tb < n_tok; tb += block) {
    const int64_t te = tb + block < n_tok ? tb + block : n_tok;
    int64_t r = r0;
    for (; r + kTileRows <= r1; r += kTileRows) sweep_tokens(multi, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
    for (; r < r1; ++r) sweep_tokens(single, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
  }
}

constexpr TileSet kF32Multi = f32_tiles<LoadF32, kTileRows>();
constexpr TileSet kF32Single = f32_tiles<LoadF32, 1>();
constexpr TileSet kF16Multi = f32_tiles<LoadF16, kTileRows>();
constexpr TileSet kF16Single = f32_tiles<LoadF16, 1>();
constexpr TileSet kBF16Multi = f32_tiles<LoadBF16, kTileRows>();
constexpr TileSet kBF16Single = f32_tiles<LoadBF16, 1>();
constexpr TileSet kBF16dpMulti = bf16dp_tiles<kTileRows>();
constexpr TileSet kBF16dpSingle = bf16dp_tiles<1>();

}  // namespace

void float_rows_f32_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kF32Multi, kF32Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_f16_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kF16Multi, kF16Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_bf16_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kBF16Multi, kBF16Single, float_act_row_bytes_f32(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_bf16dp_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  drive(kBF16dpMulti, kBF16dpSingle, float_act_row_bytes_bf16(n_in), w, w_row_bytes, n_in, xa,
        xa_stride, n_tok, y, y_stride, r0, r1);
}

}  // namespace sluice::cpu
