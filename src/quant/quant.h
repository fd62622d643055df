// Row-level quantize / dequantize / dot for every supported DType.
//
// These are the scalar reference implementations: byte-compatible with GGUF
// files written by llama.cpp (layouts in quant/blocks.h), simple, and exact in a
// documented order. SIMD and GPU kernels are tested against them. All functions
// are pure (thread-safe), allocate nothing and never fail: passing a length that
// is not a multiple of the type's block size is a caller bug (CHECK).
//
// Dequantized values are computed exactly as ggml computes them:
//   F32  x             F16  f16_to_f32(h)          BF16  bf16_to_f32(b)
//   Q8_0 d * q         Q4_0 (q - 8) * d
//   Q4_K (d * sc) * q - (dmin * m)                 Q6_K (d * sc) * (q - 32)
//   Q4_1, Q5_1  q * d + m                           Q5_0 (q - 16) * d
//   Q2_K (d * sc) * q - (dmin * m)                 Q3_K (d * (sc - 32)) * (q - 4)
//   Q5_K (d * sc) * q - (dmin * m)                 IQ4_NL d * kIq4NlValues[q]
//   IQ4_XS (d * (ls - 32)) * kIq4NlValues[q]
// where d, dmin are the block's f16 scales converted to float.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dtype.h"

namespace sluice {

// Writes the n floats of the row src (n / block_size blocks of `type`) to dst.
// src: row_bytes(type, n) bytes; dst: [n]; n a multiple of the block size.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Quantizes n floats into row_bytes(type, n) bytes at dst (reference quantizers):
//   Q8_0  d = amax / 127, q = roundf(x * (1 / d))   (ties away from zero)
//   Q4_0  d = max / -8 (max: the signed value of largest magnitude),
//         q = min(15, trunc(x * (1 / d) + 8.5))
//   Q4_K  per sub-block weighted (scale, min) search, then 6-bit scales/mins
//         against f16 super-block scales, then quants re-fitted to those
//   Q6_K  per sub-block weighted scale search, 8-bit scales against an f16 d,
//         then quants re-fitted
//   Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q5_K IQ4_NL IQ4_XS: see their declarations in
//         quant/blocks_more.h
//   F16/BF16 round to nearest even; F32 copies.
// src: [n]; n a multiple of the block size.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// Dot product of one weight row w (n elements of `type`) with x: [n].
// Order (the contract SIMD kernels are compared against): the row is split into
// groups -- one block for block types, 32 consecutive elements for F32/F16/BF16
// (the last group may be shorter). For each group in order, a float partial sum
// is accumulated over its elements in element order of w_e * x_e, w_e computed
// exactly as dequantize_row computes it; the partial is then added to a float
// total. Hence dot_row is bit-identical to this same grouped sum taken over the
// output of dequantize_row.
float dot_row(DType type, const void* w, const float* x, int64_t n);

// Quantizes a row-major matrix src: [n_rows, n_per_row] row by row into dst.
// Returns the bytes written: n_rows * row_bytes(type, n_per_row).
size_t quantize_tensor(DType type, const float* src, void* dst, int64_t n_rows,
                       int64_t n_per_row);

}  // namespace sluice
