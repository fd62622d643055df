// What the AVX2 quantized-matmul kernels (quant_rows32_avx2.cpp,
// quant_rows256_avx2.cpp, quant_rows32_x8_avx2.cpp) share: their tile shapes for
// the driver of quant_tile.h (run_rows<K>), the IQ4 codebook load, and the
// 256-bit helpers of quant_tile_simd.h. Include only from files compiled for
// AVX2 (*_avx2.cpp): everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include "backend/cpu/quant_tile_simd.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// GEMM tiles of 2 rows x 4 tokens (8 ymm accumulators of 16 registers; 2x2,
// 4x2 were slower). Decode streams one row at a time (see quant_tile_avx512.h).
using Avx2Tiles = QuantTiles<2>;

// The rows() of kernel K on these tiles (a QuantRowsFn).
template <class K>
constexpr auto run_rows = tiled_rows_of<Avx2Tiles, K>;

[[maybe_unused]] __m256i codebook() { return _mm256_broadcastsi128_si256(loadu128(kIq4NlValues)); }

}  // namespace
}  // namespace sluice::cpu
