// The register tiles and the driver of the F32 / F16 / BF16 matmul kernels,
// written once for the AVX2 and AVX-512 levels (float_matmul_avx2.cpp,
// float_matmul_avx512.cpp) over a level struct L that each of those files
// defines and compiles for its own level:
//
//   L::F, L::kLanes       the f32 vector and its lane count
//   L::zero() load(p) store(p, v) fma(a, b, c) add(a, b) hsum(v)
//   L::Tail, L::tail(k)   what a weight loader's tail() takes for the row's
//                         last k < kLanes elements (a count or a lane mask)
//   L::kActFirst          the full-vector step loads the T activation vectors
//                         first, then one weight vector at a time (else the R
//                         weight vectors first, then one activation at a time)
//   L::kTileRows, kTileTokens           the GEMM tile, R x T
//   L::kBlock             elements per partial sum (see the level's file)
//   L::kActBlockBytes, kMinBlockTokens  activations per token block, and the
//                         fewest tokens a block has
//   L::kPackBytes         stack bytes for a block's packed activations (below;
//                         0: the level does not pack)
//   L::kGemvMultiMinIn    decode (n_tok == 1) takes R-row tiles from this n_in
//
// A weight loader W has W::full(row, i) (kLanes weights at element i as
// floats) and W::tail(row, i, L::Tail). A kernel K (F32Tile<L, W> or a level's
// own) derives ActTiles<K>, which gives it K::tile<R, T>(w, w_row_bytes, n_in,
// xa, xa_stride, y, y_stride, r, t), K::act_vectors(n_in) (vectors in one
// token's activation row) and K::tile_packed<R, T>(w, w_row_bytes, n_in, xp, y,
// y_stride, r, t) over T tokens' activations packed by pack_acts.
//
// Packed activations: the driver copies a token block's activations, T tokens
// at a time, into [vector v][token b][one L::F] on its stack (the bits of f32 or
// bf16 activations alike, moved as vectors), so a GEMM
// tile reads one sequential stream of activations instead of T rows kLanes
// floats apart (6 strided streams ran at 0.65-0.9x of one: kernel benchmark,
// Zen 5, rows of 768-5632 floats). Only where the data comes from changes: each
// chain takes the same values in the same order, so the bits do not.
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

// The activation side of a tile kernel K (derived from it): T tokens'
// activations from their rows or packed by pack_acts, and the entry points
// tile / tile_packed over K::chains<R, T>(w, w_row_bytes, n_in, x, y, y_stride,
// r, t), which reads x.at(b, i), the vector of token b's activations from
// element i (a multiple of K::kActVecElems). K gives an activation element's
// bytes (kActElemBytes), the elements a vector holds (kActVecElems, 64 bytes'
// worth at AVX-512) and load_act(p), the vector at p.
template <class K>
struct ActTiles {
  // Activation rows are padded to whole vectors (convert_act).
  static int64_t act_vectors(int64_t n_in) { return (n_in + K::kActVecElems - 1) / K::kActVecElems; }

  // T tokens' activation rows, xa_stride bytes apart.
  template <int T>
  struct RowActs {
    const uint8_t* xt[T];
    [[gnu::always_inline]] auto at(int b, int64_t i) const {
      return K::load_act(xt[b] + static_cast<size_t>(i) * K::kActElemBytes);
    }
  };
  // T tokens packed by pack_acts: [i / kActVecElems][b][kActVecElems].
  template <int T>
  struct PackedActs {
    const uint8_t* xp;
    [[gnu::always_inline]] auto at(int b, int64_t i) const {
      return K::load_act(xp + static_cast<size_t>(i * T + b * K::kActVecElems) * K::kActElemBytes);
    }
  };

  template <int R, int T>
  static void tile(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
                   int64_t y_stride, int64_t r, int64_t t) {
    RowActs<T> x;
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) x.xt[b] = xa + static_cast<size_t>(t + b) * xa_stride;
    K::template chains<R, T>(w, w_row_bytes, n_in, x, y, y_stride, r, t);
  }

  template <int R, int T>
  static void tile_packed(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const float* xp, float* y,
                          int64_t y_stride, int64_t r, int64_t t) {
    K::template chains<R, T>(w, w_row_bytes, n_in, PackedActs<T>{reinterpret_cast<const uint8_t*>(xp)}, y, y_stride,
                             r, t);
  }
};

// Tile of R rows starting at r x T tokens starting at t, f32 activations: R*T
// chains of the accumulation order float_matmul.h states for the level.
template <class L, class W>
struct F32Tile : ActTiles<F32Tile<L, W>> {
  static constexpr int kActElemBytes = 4;
  static constexpr int kActVecElems = L::kLanes;
  [[gnu::always_inline]] static typename L::F load_act(const uint8_t* p) {
    return L::load(reinterpret_cast<const float*>(p));
  }

  // The R*T chains of rows r.. and tokens t.., activations from x (RowActs or PackedActs).
  template <int R, int T, class X>
  [[gnu::always_inline]] static inline void chains(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const X& x,
                                                   float* y, int64_t y_stride, int64_t r, int64_t t) {
    using F = typename L::F;
    const uint8_t* wr[R];
    F acc[R][T], total[R][T];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wr[a] = w + static_cast<size_t>(r + a) * w_row_bytes;
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
          for (int b = 0; b < T; ++b) xv[b] = x.at(b, i);
#pragma GCC unroll 8
          for (int a = 0; a < R; ++a) {
            const F wv = W::full(wr[a], i);
#pragma GCC unroll 8
            for (int b = 0; b < T; ++b) acc[a][b] = L::fma(wv, xv[b], acc[a][b]);
          }
        } else {
          step(wr, x, i, acc, [](const uint8_t* row, int64_t at) { return W::full(row, at); });
        }
      }
      if (i < kend) {
        const typename L::Tail k = L::tail(kend - i);
        step(wr, x, i, acc, [k](const uint8_t* row, int64_t at) { return W::tail(row, at, k); });
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
  template <int R, int T, class X, class Load>
  [[gnu::always_inline]] static inline void step(const uint8_t* const (&wr)[R], const X& x, int64_t i,
                                                 typename L::F (&acc)[R][T], Load load) {
    typename L::F wv[R];
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) wv[a] = load(wr[a], i);
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) {
      const typename L::F xv = x.at(b, i);
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

// Tokens [t0, t1) (whole tiles of L::kTileTokens) of activation rows of nv
// vectors into xp: for each tile, [vector v < nv][b][kLanes floats].
template <class L>
void pack_acts(const uint8_t* xa, size_t xa_stride, int64_t nv, int64_t t0, int64_t t1, float* xp) {
  constexpr int T = L::kTileTokens;
  for (int64_t t = t0; t < t1; t += T, xp += nv * L::kLanes * T) {
    const float* xt[T];
#pragma GCC unroll 8
    for (int b = 0; b < T; ++b) xt[b] = reinterpret_cast<const float*>(xa + static_cast<size_t>(t + b) * xa_stride);
    float* d = xp;
    for (int64_t v = 0; v < nv; ++v)
#pragma GCC unroll 8
      for (int b = 0; b < T; ++b, d += L::kLanes) L::store(d, L::load(xt[b] + v * L::kLanes));
  }
}

// Rows [r0, r1) x tokens [tb, te) through packed activations, as many tokens a
// pack as L::kPackBytes holds (whole tiles); tokens past the last whole tile
// from their rows. False (nothing done) if not one tile fits.
template <class L, class K>
bool sweep_packed(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, float* y,
                  int64_t y_stride, int64_t r0, int64_t r1, int64_t tb, int64_t te,
                  const FloatTileSet<L>& multi, const FloatTileSet<L>& single) {
  constexpr int R = L::kTileRows, T = L::kTileTokens;
  static_assert(K::kActVecElems * K::kActElemBytes == L::kLanes * sizeof(float), "pack_acts moves L::F vectors");
  const int64_t nv = K::act_vectors(n_in);
  const int64_t tile_floats = nv * L::kLanes * T;
  const int64_t per_pack = static_cast<int64_t>(L::kPackBytes / sizeof(float)) / tile_floats * T;
  if (per_pack == 0) return false;
  alignas(64) float xp[L::kPackBytes / sizeof(float)];
  for (int64_t t0 = tb; t0 < te; t0 += per_pack) {
    const int64_t t1 = t0 + per_pack < te ? t0 + per_pack : te;
    const int64_t whole = t0 + (t1 - t0) / T * T;
    pack_acts<L>(xa, xa_stride, nv, t0, whole, xp);
    int64_t r = r0;
    for (; r + R <= r1; r += R) {
      for (int64_t t = t0; t < whole; t += T)
        K::template tile_packed<R, T>(w, w_row_bytes, n_in, xp + (t - t0) / T * tile_floats, y, y_stride, r, t);
      if (whole < t1) multi.by_tokens[t1 - whole](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, whole);
    }
    for (; r < r1; ++r) {
      for (int64_t t = t0; t < whole; t += T)
        K::template tile_packed<1, T>(w, w_row_bytes, n_in, xp + (t - t0) / T * tile_floats, y, y_stride, r, t);
      if (whole < t1) single.by_tokens[t1 - whole](w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, whole);
    }
  }
  return true;
}

// rows() of kernel K (a RowsFn) over rows [r0, r1) x all tokens, activation
// rows of ActBytes(n_in) bytes: tiles of L::kTileRows rows, then of one row;
// a block of L::kTileTokens or more tokens through packed activations where
// the level packs (L::kPackBytes > 0).
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
    if constexpr (L::kPackBytes > 0) {
      if (te - tb >= L::kTileTokens &&
          sweep_packed<L, K>(w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r0, r1, tb, te, kMulti, kSingle))
        continue;
    }
    int64_t r = r0;
    for (; r + L::kTileRows <= r1; r += L::kTileRows)
      sweep_tokens<L>(kMulti, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
    for (; r < r1; ++r) sweep_tokens<L>(kSingle, w, w_row_bytes, n_in, xa, xa_stride, y, y_stride, r, tb, te);
  }
}

}  // namespace
}  // namespace sluice::cpu
