// What the AVX2 quantized-matmul kernels (quant_rows32_avx2.cpp,
// quant_rows256_avx2.cpp, quant_rows32_x8_avx2.cpp) share: their tile shapes for
// the driver of quant_tile.h (run_rows<K>), horizontal sums, the accumulator store
// and the nibble / IQ4 codebook loads. Include only from files compiled for AVX2 (*_avx2.cpp): everything
// here has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_tile.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// GEMM tiles of 2 rows x 4 tokens (8 ymm accumulators of 16 registers; 2x2,
// 4x2 were slower). Decode streams one row at a time (see quant_tile_avx512.h).
struct Avx2Tiles {
  static constexpr int kTileRows = 2;
  static constexpr int kTileToks = 4;
  static constexpr int kGemvRows = 1;
  static constexpr size_t kChunkActBytes = 256 * 1024;
};
[[maybe_unused]] float hsum8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

[[maybe_unused]] float f16(uint16_t h) { return _cvtsh_ss(h); }

__m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <int NR, int NT>
void store_acc8(const Args& a, int64_t r, int64_t t, const __m256 (&acc)[NR][NT]) {
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum8(acc[i][j]);
}

// The rows() of kernel K on these tiles (a QuantRowsFn).
template <class K>
constexpr auto run_rows = tiled_rows_of<Avx2Tiles, K>;

[[maybe_unused]] __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 bytes of nibbles (Q4_0 layout) -> 32 bytes in element order, 0..15 each.
[[maybe_unused]] __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i v = loadu128(qs);
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

[[maybe_unused]] __m256i codebook() { return _mm256_broadcastsi128_si256(loadu128(kIq4NlValues)); }

}  // namespace
}  // namespace sluice::cpu
