// What the AVX2 and AVX-512 quantized-matmul kernels share on 256-bit vectors
// (both levels have AVX2): the tile shapes' common part, loads, the f16
// scale, nibble unpacking and the 8-lane accumulator store. Included by
// quant_tile_avx2.h and quant_tile_avx512.h only, so every file including it is
// compiled for one of the two levels: everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_tile.h"

namespace sluice::cpu {
namespace {

// Tile shapes for the driver of quant_tile.h: GEMM tiles of kRows rows x 4
// tokens, decode one row at a time, a token chunk's activations in L2.
template <int kRows>
struct QuantTiles {
  static constexpr int kTileRows = kRows;
  static constexpr int kTileToks = 4;
  static constexpr int kGemvRows = 1;
  static constexpr size_t kChunkActBytes = 256 * 1024;
};

// Sum of 8 lanes in a fixed order.
[[maybe_unused]] float hsum8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

[[maybe_unused]] float f16(uint16_t h) { return _cvtsh_ss(h); }

[[maybe_unused]] __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
[[maybe_unused]] __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of nibbles (Q4_0 layout) -> 32 bytes in element order, 0..15 each.
[[maybe_unused]] __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i v = loadu128(qs);
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

// The per-super-block float update of the 256-element kernels (8 lanes):
// acc += cvt(isum) * d*ad - cvt(madd(bsum, mins)) * dmin*ad.
[[maybe_unused]] void finish_with_mins(__m256i isum, __m256i bsum, __m256i mins, float d, float dmin, float ad,
                                       __m256* acc) {
  const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsum, mins));
  *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * ad), *acc);
  *acc = _mm256_fnmadd_ps(msum, _mm256_set1_ps(dmin * ad), *acc);
}

// y[t + j][r + i] = the sum of acc[i][j]'s 8 lanes.
template <int NR, int NT>
void store_acc8(const Args& a, int64_t r, int64_t t, const __m256 (&acc)[NR][NT]) {
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
}

}  // namespace
}  // namespace sluice::cpu
