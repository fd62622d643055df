// Q4_0 rows (blocks of 32 elements, 4-bit quants offset by 8): the typed reference
// quantizer, dequantizer and dot product behind quant/quant.h. Layout and value
// formula in quant/blocks.h; summation order as documented for dot_row().
// Pure functions, thread-safe, no allocation; n is a multiple of the block size.
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace sluice {

// blocks: [n / block size]; dst: [n].
void dequantize_row_q4_0(const BlockQ4_0* blocks, float* dst, int64_t n);
// src: [n]; blocks: [n / block size].
void quantize_row_q4_0(const float* src, BlockQ4_0* blocks, int64_t n);
// blocks: [n / block size]; x: [n].
float dot_row_q4_0(const BlockQ4_0* blocks, const float* x, int64_t n);

}  // namespace sluice
