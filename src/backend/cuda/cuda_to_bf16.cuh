// Conversions to BF16 for the tensor-core matmul (cuda_prefill.h): weight
// matrices of every type the CUDA matmul reads, decoded with the same
// per-type decoders as the GEMV kernels (cuda_dequant.cuh), and activations.
// Each value is computed in float exactly as dequantize_row computes it, then
// rounded to the nearest BF16 (ties to even). Also the split of a merged
// GEMM's output into its parts. Enqueued on the given stream;
// no allocation, no synchronization; every pointer is device memory.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/op_types.h"

namespace sluice::cuda {

// Whether launch_weights_to_bf16 reads this matrix: a type of
// matmul_supports() but F32, GGUF rows with n_in a multiple of the type's
// block (of 8 for F16 / BF16) and data aligned for the decoder's loads (16
// bytes for F16 / BF16, 4 for blocks of a multiple of 4 bytes, else 2), or
// Q4_0 / Q8_0 with the scales split off (quant/split_scales.h) and 16-byte
// aligned.
bool to_bf16_takes(const WeightView& w);
// Whether it takes matrices of this type and layout (alignment and width aside).
bool to_bf16_type(DType type, WeightLayout layout);
// out[r][i] = bf16(W[row0 + r][i]) for r < n_rows.   out: [n_rows, w.n_in], 16-byte aligned
void launch_weights_to_bf16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out, cudaStream_t s);
// out[i] = bf16(x[i]) for i < n.   x, out: [n], 16-byte aligned
void launch_floats_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);

// Up to 4 parts' columns of a merged output: part p has columns [end[p-1], end[p]).
struct ColumnParts {
  float* y[4] = {};      // [n_tok, its columns]
  int64_t end[4] = {};   // end[n_parts - 1] = the merged row's width
  int n_parts = 0;
};
// parts.y[p][t][c] = y[t][start_p + c].   y: [n_tok, parts.end[n_parts - 1]]
void launch_split_columns(const float* y, int64_t n_tok, const ColumnParts& parts, cudaStream_t s);

}  // namespace sluice::cuda
