// IQ4_NL and IQ4_XS rows (4-bit indices into the fixed non-linear codebook
// kIq4NlValues; layouts and value formulas in quant/blocks_more.h): the typed
// reference quantizers and dequantizers behind quant/quant.h. Pure functions,
// thread-safe, no allocation; n is a multiple of 32 (IQ4_NL) or 256 (IQ4_XS).
#pragma once

#include <cstdint>

#include "quant/blocks_more.h"

namespace sluice {

// blocks: [n / block size]; dst: [n].
void dequantize_row_iq4_nl(const BlockIq4Nl* blocks, float* dst, int64_t n);
void dequantize_row_iq4_xs(const BlockIq4Xs* blocks, float* dst, int64_t n);

// src: [n]; blocks: [n / block size]. Per group of 32, the scale minimizing the
// squared error over candidate scales (each value mapped to its nearest codebook
// entry, then a least-squares scale for that assignment); IQ4_XS then stores the
// group scales as 6-bit signed multiples of an f16 d. Indices are re-fitted to
// the stored scales.
void quantize_row_iq4_nl(const float* src, BlockIq4Nl* blocks, int64_t n);
void quantize_row_iq4_xs(const float* src, BlockIq4Xs* blocks, int64_t n);

// The index of the codebook entry nearest to v (ties to the lower index).
int iq4_nearest_index(float v);

}  // namespace sluice
