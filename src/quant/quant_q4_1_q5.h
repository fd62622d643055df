// Q4_1, Q5_0 and Q5_1 rows (blocks of 32 elements; layouts and value formulas in
// quant/blocks_more.h): the typed reference quantizers and dequantizers behind
// quant/quant.h. Pure functions, thread-safe, no allocation; n is a multiple of 32.
#pragma once

#include <cstdint>

#include "quant/blocks_more.h"

namespace sluice {

// blocks: [n / 32]; dst: [n].
void dequantize_row_q4_1(const BlockQ4_1* blocks, float* dst, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* blocks, float* dst, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* blocks, float* dst, int64_t n);

// src: [n]; blocks: [n / 32].
//   Q4_1, Q5_1: least-squares (scale, offset) search over candidate scales
//               (search_scale_min on x - min(x), so the offset may have any sign)
//   Q5_0:       symmetric scale search (search_scale_symmetric, nmax 16)
// then the quants re-fitted to the f16 scales the block stores.
void quantize_row_q4_1(const float* src, BlockQ4_1* blocks, int64_t n);
void quantize_row_q5_0(const float* src, BlockQ5_0* blocks, int64_t n);
void quantize_row_q5_1(const float* src, BlockQ5_1* blocks, int64_t n);

}  // namespace sluice
