// What the AVX-512 quantized-matmul kernels (quant_rows32_avx512.cpp,
// quant_rows256_avx512.cpp, quant_rows32_x16_avx512.cpp) share: their tile
// shapes for the driver of quant_tile.h (run_rows<K>, rows_x4<K>), software
// prefetch, horizontal sums, the accumulator store and byte loads, with the
// 256-bit helpers of quant_tile_simd.h. Include only from files compiled for
// AVX-512 (*_avx512.cpp): everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_tile_simd.h"
#include "backend/cpu/vec_math_avx512.h"

namespace sluice::cpu {
namespace {

// GEMM tiles of 4 rows x 4 tokens: 16 f32 accumulators plus the 4 rows'
// unpacked weights and scales fill the 32 zmm registers (4x3, 3x4 and 2x4 were
// no faster here). Decode streams one row at a time: with 2 or 4 rows
// interleaved the hardware prefetcher fell behind and GEMV from DRAM dropped
// from ~25 to ~14 GB/s on the Zen 4 this was tuned on.
using Avx512Tiles = QuantTiles<4>;
constexpr int kPrefetchBytes = 512;            // software prefetch distance per row stream

[[maybe_unused]] void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// Sum of 16 lanes in a fixed order.
[[maybe_unused]] float hsum16(__m512 v) { return avx512::hsum(v); }

// Sum of the two 256-bit halves of 16 int32 lanes.
[[maybe_unused]] __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

template <int NR, int NT>
void store_acc16(const Args& a, int64_t r, int64_t t, const __m512 (&acc)[NR][NT]) {
  for (int j = 0; j < NT; ++j)
    for (int i = 0; i < NR; ++i) a.y[(t + j) * a.y_stride + r + i] = hsum16(acc[i][j]);
}

template <class K>
void rows_x4(const Args& a, int64_t n_tok, int64_t r0, int64_t r1) {
  tiled_rows_x4<Avx512Tiles, K>(a, n_tok, r0, r1);
}

// The rows() of kernel K on these tiles (a QuantRowsFn).
template <class K>
constexpr auto run_rows = tiled_rows_of<Avx512Tiles, K>;

[[maybe_unused]] __m512i halves(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Signed codebook bytes -> their magnitudes, and the mask of the negative ones.
[[maybe_unused]] void split_sign(__m512i v, __m512i* magnitude, __mmask64* negative) {
  *negative = _mm512_movepi8_mask(v);
  *magnitude = _mm512_abs_epi8(v);
}

// q with the lanes of `negative` negated (|q| <= 127, so no overflow).
[[maybe_unused]] __m512i apply_sign(__m512i q, __mmask64 negative) {
  return _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
}

}  // namespace
}  // namespace sluice::cpu
