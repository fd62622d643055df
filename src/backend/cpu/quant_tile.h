// Tiling driver shared by the quantized-matmul kernels of every SIMD level
// (quant_tile_avx2.h, quant_tile_avx512.h). A kernel K provides
// K::tile<NR, NT>(args, r, t), computing NR rows x NT tokens at (r, t);
// tiled_rows<S, K>() walks [r0, r1) x [0, n_tok) with one tile shape for decode
// (1 token) and another for batches, so y[t][r] depends neither on n_tok nor
// on the row split:
//
//   decode:  tiles of S::kGemvRows rows x 1 token, rows in order
//   batch:   tokens in chunks of about S::kChunkActBytes of activations (a
//            multiple of S::kTileToks: they stay in L2 while every row tile
//            passes), in each chunk tiles of S::kTileRows x S::kTileToks, edges
//            narrower
//
// scalar_rows() is the scalar kernels' driver: one (row, token) at a time.
//
// Only templates with internal linkage: every translation unit that includes
// it gets its own instantiations, compiled for its level.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace sluice::cpu {
namespace {

// The rows() arguments every tile needs.
struct Args {
  const uint8_t* w;    // rows of weights, w_row_bytes apart
  size_t w_row_bytes;
  int64_t n_in;        // elements per row
  const uint8_t* xa;   // quantized activations of token t at xa + t * xa_stride
  size_t xa_stride;
  float* y;            // y[t * y_stride + r]
  int64_t y_stride;
};

using TileFn = void (*)(const Args&, int64_t r, int64_t t);

// Token t's activations and row r's weight blocks, typed.
template <typename Act>
const Act* act_row(const Args& a, int64_t t) {
  return reinterpret_cast<const Act*>(a.xa + t * a.xa_stride);
}

template <typename Block>
const Block* weight_row(const Args& a, int64_t r) {
  return reinterpret_cast<const Block*>(a.w + r * a.w_row_bytes);
}

// What a tile of NR rows at r x NT tokens at t reads: wr[i] = row r + i's
// blocks, xt[j] = token t + j's activations.
template <typename Block, typename Act, int NR, int NT>
struct TileRows {
  const Block* wr[NR];
  const Act* xt[NT];
};

template <typename Block, typename Act, int NR, int NT>
[[gnu::always_inline]] inline TileRows<Block, Act, NR, NT> tile_rows(const Args& a, int64_t r, int64_t t) {
  TileRows<Block, Act, NR, NT> p{};
  for (int i = 0; i < NR; ++i) p.wr[i] = weight_row<Block>(a, r + i);
  for (int j = 0; j < NT; ++j) p.xt[j] = act_row<Act>(a, t + j);
  return p;
}

// acc[i][j] = v for every i, j (in registers: an aggregate zero-initialization
// here became a rep stos to the stack, which the first loads then waited on).
template <typename T, int NR, int NT>
[[gnu::always_inline]] inline void fill(T (&acc)[NR][NT], T v) {
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NT; ++j) acc[i][j] = v;
}

// Tokens per chunk for S: a multiple of S::kTileToks, at least one tile.
template <class S>
int64_t token_chunk(const Args& a) {
  int64_t chunk = static_cast<int64_t>(S::kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  return chunk < S::kTileToks ? S::kTileToks : chunk / S::kTileToks * S::kTileToks;
}

// Tile of nr (1..4) rows x nt (1..4) tokens at (r, t).
template <class S, class K>
void tile_any(const Args& a, int nr, int nt, int64_t r, int64_t t) {
  static constexpr TileFn kTable[4][4] = {
      {K::template tile<1, 1>, K::template tile<1, 2>, K::template tile<1, 3>, K::template tile<1, 4>},
      {K::template tile<2, 1>, K::template tile<2, 2>, K::template tile<2, 3>, K::template tile<2, 4>},
      {K::template tile<3, 1>, K::template tile<3, 2>, K::template tile<3, 3>, K::template tile<3, 4>},
      {K::template tile<4, 1>, K::template tile<4, 2>, K::template tile<4, 3>, K::template tile<4, 4>}};
  static_assert(S::kTileRows <= 4 && S::kTileToks <= 4 && S::kGemvRows <= 4, "table covers 4 x 4");
  kTable[nr - 1][nt - 1](a, r, t);
}

template <class S, class K>
void tiled_rows(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  if (n_tok == 1) {
    for (int64_t r = r0; r < r1; r += S::kGemvRows) {
      const int nr = static_cast<int>(r1 - r < S::kGemvRows ? r1 - r : S::kGemvRows);
      tile_any<S, K>(a, nr, 1, r, 0);
    }
    return;
  }
  const int64_t chunk = token_chunk<S>(a);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
    for (int64_t r = r0; r < r1; r += S::kTileRows) {
      const int nr = static_cast<int>(r1 - r < S::kTileRows ? r1 - r : S::kTileRows);
      for (int64_t t = t0; t < t1; t += S::kTileToks) {
        const int nt = static_cast<int>(t1 - t < S::kTileToks ? t1 - t : S::kTileToks);
        tile_any<S, K>(a, nr, nt, r, t);
      }
    }
  }
}

// tiled_rows<S, K> with the arguments of MatmulKernel::rows.
template <class S, class K>
void tiled_rows_of(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  tiled_rows<S, K>(Args{.w = w, .w_row_bytes = w_row_bytes, .n_in = n_in, .xa = xa, .xa_stride = xa_stride, .y = y,
                        .y_stride = y_stride},
                   n_tok, r0, r1);
}

// K::tile<1> .. K::tile<sizeof...(N)>, indexed by token count - 1.
template <class K, int... N>
constexpr std::array<TileFn, sizeof...(N)> x4_tiles(std::integer_sequence<int, N...>) {
  return {K::template tile<N + 1>...};
}

// Rows [r0, r1) (multiples of 4) of a 4-row interleaved layout (repack.h):
// K::tile<NT>(args, r, t) computes the 4 rows of the group at r for NT tokens;
// decode walks the groups with one token, batches take NT = S::kTileToks.
template <class S, class K>
void tiled_rows_x4(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  static constexpr auto kTiles = x4_tiles<K>(std::make_integer_sequence<int, S::kTileToks>{});
  const int64_t chunk = token_chunk<S>(a);
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
    for (int64_t r = r0; r < r1; r += 4) {
      for (int64_t t = t0; t < t1; t += S::kTileToks) {
        const int nt = static_cast<int>(t1 - t < S::kTileToks ? t1 - t : S::kTileToks);
        kTiles[nt - 1](a, r, t);
      }
    }
  }
}

// rows() of a scalar kernel: y[t][r] = Dot(row r, token t's activations), Dot
// taking the row's n_in / kBlock blocks.
template <typename Block, typename Act, float (*Dot)(const Block*, const Act*, int64_t), int64_t kBlock>
void scalar_rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                 int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const Act*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = Dot(reinterpret_cast<const Block*>(w + r * w_row_bytes), a, n_in / kBlock);
  }
}

}  // namespace
}  // namespace sluice::cpu
