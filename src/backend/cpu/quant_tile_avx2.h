// Tiling driver shared by the AVX2 quantized-matmul kernels
// (quant_matmul_avx2.cpp, quant_matmul_more_avx2.cpp): a kernel K provides
// K::tile<NR, NT>(args, r, t), computing NR rows x NT tokens at (r, t), and
// rows<K>() walks the [r0, r1) x [0, n_tok) range with one tile shape for
// decode (1 token) and another for batches, so y[t][r] does not depend on
// n_tok or the row split. Include only from files compiled for AVX2
// (*_avx2.cpp): everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace sluice::cpu {
namespace {

struct Args {
  const uint8_t* w;
  size_t w_row_bytes;
  int64_t n_in;
  const uint8_t* xa;
  size_t xa_stride;
  float* y;
  int64_t y_stride;
};

// GEMM tiles of 2 rows x 4 tokens (8 ymm accumulators of 16 registers; 2x2,
// 4x2 were slower). Decode streams one row at a time (see the AVX-512 file).
constexpr int kTileRows = 2;
constexpr int kTileToks = 4;
constexpr int kGemvRows = 1;
constexpr size_t kChunkActBytes = 256 * 1024;

float hsum8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

float f16(uint16_t h) { return _cvtsh_ss(h); }

__m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <int NR, int NT>
void store_acc8(const Args& a, int64_t r, int64_t t, const __m256 (&acc)[NR][NT]) {
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
}

using TileFn = void (*)(const Args&, int64_t r, int64_t t);

// Tile of nr (1..4) rows x nt (1..4) tokens at (r, t).
template <class K>
void tile_any(const Args& a, int nr, int nt, int64_t r, int64_t t) {
  static constexpr TileFn kTable[4][4] = {
      {K::template tile<1, 1>, K::template tile<1, 2>, K::template tile<1, 3>, K::template tile<1, 4>},
      {K::template tile<2, 1>, K::template tile<2, 2>, K::template tile<2, 3>, K::template tile<2, 4>},
      {K::template tile<3, 1>, K::template tile<3, 2>, K::template tile<3, 3>, K::template tile<3, 4>},
      {K::template tile<4, 1>, K::template tile<4, 2>, K::template tile<4, 3>, K::template tile<4, 4>}};
  static_assert(kTileRows <= 4 && kTileToks <= 4 && kGemvRows <= 4, "table covers 4 x 4");
  kTable[nr - 1][nt - 1](a, r, t);
}

template <class K>
void rows(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  if (n_tok == 1) {
    for (int64_t r = r0; r < r1; r += kGemvRows) {
      const int nr = static_cast<int>(r1 - r < kGemvRows ? r1 - r : kGemvRows);
      tile_any<K>(a, nr, 1, r, 0);
    }
    return;
  }
  int64_t chunk = static_cast<int64_t>(kChunkActBytes / (a.xa_stride ? a.xa_stride : 1));
  chunk = chunk < kTileToks ? kTileToks : chunk / kTileToks * kTileToks;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t t1 = t0 + chunk < n_tok ? t0 + chunk : n_tok;
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int nr = static_cast<int>(r1 - r < kTileRows ? r1 - r : kTileRows);
      for (int64_t t = t0; t < t1; t += kTileToks) {
        const int nt = static_cast<int>(t1 - t < kTileToks ? t1 - t : kTileToks);
        tile_any<K>(a, nr, nt, r, t);
      }
    }
  }
}


}  // namespace
}  // namespace sluice::cpu
