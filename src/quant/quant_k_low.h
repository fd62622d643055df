// Q2_K and Q3_K rows (super-blocks of 16 x 16 elements with 2- and 3-bit quants;
// layouts and value formulas in quant/blocks_more.h): the typed reference
// quantizers and dequantizers behind quant/quant.h. Pure functions, thread-safe,
// no allocation; n is a multiple of 256.
#pragma once

#include <cstdint>

#include "quant/blocks_more.h"

namespace sluice {

// blocks: [n / 256]; dst: [n].
void dequantize_row_q2_k(const BlockQ2_K* blocks, float* dst, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* blocks, float* dst, int64_t n);

// src: [n]; blocks: [n / 256].
//   Q2_K  per sub-block weighted (scale, min) search, then 4-bit scales and mins
//         against f16 d / dmin, then quants re-fitted to those
//   Q3_K  per sub-block symmetric scale search (q - 4 in [-4, 3]), then 6-bit
//         signed scales against an f16 d, then quants re-fitted
void quantize_row_q2_k(const float* src, BlockQ2_K* blocks, int64_t n);
void quantize_row_q3_k(const float* src, BlockQ3_K* blocks, int64_t n);

}  // namespace sluice
