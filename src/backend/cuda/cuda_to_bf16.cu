// Conversions to BF16 (cuda_to_bf16.cuh).
//
// GGUF rows: one thread per (row, block, lane) piece of 8 elements, in the
// decoders' order (cuda_dequant.cuh), so the lanes of a warp read one
// contiguous span of blocks; a piece lands as two runs of 4 BF16 (8-byte
// stores) at the decoder's x_off positions, and a warp's stores cover whole
// blocks of the output row. Split Q4_0 / Q8_0: four threads a block, each 8
// quant bytes in and 8 BF16 out in one 16-byte store, so a warp's stores are
// 512 contiguous bytes (cuda_decode_rows.cuh).
#include <cstdint>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_decode_rows.cuh"
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_to_bf16.cuh"
#include "base/check.h"
#include "quant/dtype.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void floats_to_bf16(const float4* x, int64_t n4, uint2* out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x) {
    const float4 v = x[i];
    out[i] = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
  }
}

__global__ void floats_to_bf16_tail(const float* x, int64_t from, int64_t n, uint16_t* out) {
  const int64_t i = from + threadIdx.x;
  if (i < n) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void split_columns(const float* y, int64_t n, ColumnParts parts) {
  const int64_t width = parts.end[parts.n_parts - 1];
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    int p = 0;
    while (c >= parts.end[p]) ++p;
    const int64_t start = p == 0 ? 0 : parts.end[p - 1];
    parts.y[p][t * (parts.end[p] - start) + (c - start)] = y[i];
  }
}

}  // namespace

bool to_bf16_takes(const WeightView& w) { return decodes_rows(w); }
bool to_bf16_type(DType type, WeightLayout layout) { return decodes_rows(type, layout); }

void launch_weights_to_bf16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out, cudaStream_t s) {
  launch_decode_rows(w, row0, n_rows, out, s);
}

void launch_split_columns(const float* y, int64_t n_tok, const ColumnParts& parts, cudaStream_t s) {
  CHECK(parts.n_parts >= 1 && parts.n_parts <= 4);
  const int64_t n = n_tok * parts.end[parts.n_parts - 1];
  if (n == 0) return;
  split_columns<<<grid_for(n), kThreads, 0, s>>>(y, n, parts);
  SLUICE_CUDA_LAUNCHED();
}

void launch_floats_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0);
  const int64_t n4 = n / 4;
  if (n4 > 0)
    floats_to_bf16<<<grid_for(n4), kThreads, 0, s>>>(reinterpret_cast<const float4*>(x), n4, reinterpret_cast<uint2*>(out));
  if (n % 4 != 0) floats_to_bf16_tail<<<1, 4, 0, s>>>(x, 4 * n4, n, out);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
