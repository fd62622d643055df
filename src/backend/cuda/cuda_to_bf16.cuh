// Conversions to BF16 for the tensor-core matmul (cuda_prefill.h): weight
// matrices of every type the CUDA matmul reads, decoded with the same
// per-type decoders as the GEMV kernels (cuda_dequant.cuh), and activations.
// Each value is computed in float exactly as dequantize_row computes it, then
// rounded to the nearest BF16 (ties to even). Enqueued on the given stream;
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
// out[r][i] = bf16(W[row0 + r][i]) for r < n_rows.   out: [n_rows, w.n_in], 16-byte aligned
void launch_weights_to_bf16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out, cudaStream_t s);
// out[i] = bf16(x[i]) for i < n.   x, out: [n], 16-byte aligned
void launch_floats_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);

}  // namespace sluice::cuda
