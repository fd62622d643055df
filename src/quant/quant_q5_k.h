// Q5_K rows (super-blocks of 8 x 32 elements, 5-bit quants with 6-bit scales and
// mins; layout and value formula in quant/blocks_more.h): the typed reference
// quantizer and dequantizer behind quant/quant.h. Pure functions, thread-safe,
// no allocation; n is a multiple of 256.
#pragma once

#include <cstdint>

#include "quant/blocks_more.h"

namespace sluice {

// blocks: [n / 256]; dst: [n].
void dequantize_row_q5_k(const BlockQ5_K* blocks, float* dst, int64_t n);
// src: [n]; blocks: [n / 256]. Per sub-block weighted (scale, min) search, 6-bit
// scales and mins against f16 d / dmin, then quants re-fitted (as Q4_K).
void quantize_row_q5_k(const float* src, BlockQ5_K* blocks, int64_t n);

}  // namespace sluice
