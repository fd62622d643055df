// The register tiles and the driver of the F32 / F16 / BF16 matmul kernels,
// written once for the AVX2 and AVX-512 levels (float_matmul_avx2.cpp,
// float_matmul_avx512.cpp) over a level struct L that each of those files
// defines and compiles for its own level:
//
//   L::F, L::kLanes       the f32 vector and its lane count
//   L::zero() load(p) fma(a, b, c) add(a, b) hsum(v)
//   L::Tail, L::tail(k)   what a weight loader's tail() takes for the row's
//                         last k < kLanes elements (a count or a lane mask)
//   L::kActFirst          the full-vector step loads the T activation vectors
//                         first, then one weight vector at a time (else the R
//                         weight vectors first, then one activation at a time)
//   L::kTileRows, kTileTokens           the GEMM tile, R x T
//   L::kBlock             elements per partial sum (see the level's file)
//   L::kActBlockBytes, kMinBlockTokens  activations per token block, and the
//                         fewest tokens a block has
//   L::kGemvMultiMinIn    decode (n_tok == 1) takes R-row tiles from this n_in
//
// A weight loader W has W::full(row, i) (kLanes weights at element i as
// floats) and W::tail(row, i, L::Tail). A kernel K (F32Tile<L, W> or a level's
// own) has K::tile<R, T>(w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t).
//
// Include it only from those two files: everything here has internal linkage,
// so each file gets its own instantiations, compiled for its level.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "backend/cpu/rows_fn.h"

namespace sluice::cpu {
namespace {

// Tile of R rows starting at r x T tokens starting at t, f32 activations: R*T
// chains of the accumulation order float_matmul.h states for the level.
template <class L, class W>
struct F32Tile {
  template <int R, int T>
  static void tile(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
                   int64_t y_stride, int64_t r, int64_t t) {
    using F = typename L::F;
    const uint8_t* wr[R];
    const float* xt[T];
    F acc[R][T], total[R][T];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) xt[b] = reinterpret_cast<const float*>(xa + static_cast<size_t>(t + b) * xa_stride);
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) total[a][b] = L::zero();
    for (int64_t kb = 0; kb < n_in; kb += L::kBlock) {
      const int64_t kend = kb + L::kBlock < n_in ? kb + L::kBlock : n_in;
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
        for (int b = 0; b < T; ++b) acc[a][b] = L::zero();
      int64_t i = kb;
      for (; i + L::kLanes <= kend; i += L::kLanes) {
        if constexpr (L::kActFirst) {
          F xv[T];
#pragma GCC unroll 8
          for (int b = 0; b < T; ++b) xv[b] = L::load(xt[b] + i);
#pragma GCC unroll 8
          for (int a = 0; a < R; ++a) {
            const F wv = W::full(wr[a], i);
#pragma GCC unroll 8
            for (int b = 0; b < T; ++b) acc[a][b] = L::fma(wv, xv[b], acc[a][b]);
          }
        } else {
          step(wr, xt, i, acc, [](const uint8_t* row, int64_t at) { return W::full(row, at); });
        }
      }
      if (i < kend) {
        const typename L::Tail k = L::tail(kend - i);
        step(wr, xt, i, acc, [k](const uint8_t* row, int64_t at) { return W::tail(row, at, k); });
      }
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
        for (int b = 0; b < T; ++b) total[a][b] = L::add(total[a][b], acc[a][b]);
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b) y[(t + b) * y_stride + r + a] = L::hsum(total[a][b]);
  }

  // The R weight vectors at element i (by load), then one activation vector at a time.
  template <int R, int T, class Load>
  [[gnu::always_inline]] static inline void step(const uint8_t* const (&wr)[R], const float* const (&xt)[T], int64_t i,
                                                 typename L::F (&acc)[R][T], Load load) {
    typename L::F wv[R];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wv[a] = load(wr[a], i);
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) {
      const typename L::F xv = L::load(xt[b] + i);
#pragma GCC unroll 8
      for (int a = 0; a < R; ++a) acc[a][b] = L::fma(wv[a], xv, acc[a][b]);
    }
  }
};

// A tile function for R rows and T tokens.
using FloatTileFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, size_t, float*, int64_t, int64_t,
                             int64_t);

// Tiles of one row count, indexed by token count 1..L::kTileTokens.
template <class L>
struct FloatTileSet {
  FloatTileFn by_tokens[L::kTileTokens + 1];
};

template <class L, class K, int R, int... T>
constexpr FloatTileSet<L> float_tile_set(std::integer_sequence<int, T...>) {
  return FloatTileSet<L>{{nullptr, K::template tile<R, T + 1>...}};
}

template <class L, class K, int R>
constexpr FloatTileSet<L> float_tiles() {
  return float_tile_set<L, K, R>(std::make_integer_sequence<int, L::kTileTokens>{});
}

// Runs every token of [t0, t1) through tiles of one row count starting at row r.
template <class L>
void sweep_tokens(const FloatTileSet<L>& set, const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                  size_t xa_stride, float* y, int64_t y_stride, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + L::kTileTokens <= t1; t += L::kTileTokens)
    set.by_tokens[L::kTileTokens](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
  if (t < t1) set.by_tokens[t1 - t](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, t);
}

// rows() of kernel K (a RowsFn) over rows [r0, r1) x all tokens, activation
// rows of ActBytes(n_in) bytes: tiles of L::kTileRows rows, then of one row.
template <class L, class K, size_t (*ActBytes)(int64_t)>
void float_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  static constexpr FloatTileSet<L> kMulti = float_tiles<L, K, L::kTileRows>();
  static constexpr FloatTileSet<L> kSingle = float_tiles<L, K, 1>();
  if (n_tok == 1) {
    int64_t r = r0;
    if (n_in >= L::kGemvMultiMinIn)
      for (; r + L::kTileRows <= r1; r += L::kTileRows)
        kMulti.by_tokens[1](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, 0);
    for (; r < r1; ++r) kSingle.by_tokens[1](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, 0);
    return;
  }
  int64_t block = L::kActBlockBytes / static_cast<int64_t>(ActBytes(n_in));
  block = block < L::kMinBlockTokens ? L::kMinBlockTokens : block / L::kTileTokens * L::kTileTokens;
  for (int64_t tb = 0; tb < n_tok; tb += block) {
    const int64_t te = tb + block < n_tok ? tb + block : n_tok;
    int64_t r = r0;
    for (; r + L::kTileRows <= r1; r += L::kTileRows)
      sweep_tokens<L>(kMulti, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
    for (; r < r1; ++r) sweep_tokens<L>(kSingle, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
  }
}

}  // namespace
}  // namespace sluice::cpu
