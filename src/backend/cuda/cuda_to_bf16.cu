// Conversions to BF16 (cuda_to_bf16.cuh).
//
// GGUF rows: one thread per (row, block, lane) piece of 8 elements, in the
// decoders' order (cuda_dequant.cuh), so the lanes of a warp read one
// contiguous span of blocks; a piece lands as two runs of 4 BF16 (8-byte
// stores) at the decoder's x_off positions, and a warp's stores cover whole
// blocks of the output row. Split Q4_0 / Q8_0: four threads a block, each 8
// quant bytes in and 8 BF16 out in one 16-byte store, so a warp's stores are
// 512 contiguous bytes (cuda_decode_rows.cuh).
#include <algorithm>
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

// Grid: x over a row's columns, y over tokens (a stride past 65535); no
// division per element, and the part picked with fixed indices, so the
// parameters stay in registers.
__global__ void split_columns(const float* y, int n_tok, int width, ColumnParts parts) {
  for (int t = static_cast<int>(blockIdx.y); t < n_tok; t += static_cast<int>(gridDim.y)) {
    const float* row = y + static_cast<int64_t>(t) * width;
    for (int c = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); c < width;
         c += static_cast<int>(gridDim.x * blockDim.x)) {
      float* out = parts.y[0];
      int start = 0, part_width = static_cast<int>(parts.end[0]);
#pragma unroll
      for (int k = 1; k < 4; ++k) {
        if (k < parts.n_parts && c >= parts.end[k - 1]) {
          out = parts.y[k];
          start = static_cast<int>(parts.end[k - 1]);
          part_width = static_cast<int>(parts.end[k] - parts.end[k - 1]);
        }
      }
      out[static_cast<int64_t>(t) * part_width + (c - start)] = row[c];
    }
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
  const int64_t width = parts.end[parts.n_parts - 1];
  CHECK(width < (int64_t{1} << 31) && n_tok < (int64_t{1} << 31));
  if (n_tok == 0 || width == 0) return;
  const dim3 grid(static_cast<unsigned>((width + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(n_tok, 65535)));
  split_columns<<<grid, kThreads, 0, s>>>(y, static_cast<int>(n_tok), static_cast<int>(width), parts);
  SLUICE_CUDA_LAUNCHED();
}

void launch_floats_to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0);
  const int64_t n4 = n / 4;
  if (n4 > 0)
    floats_to_bf16<<<grid_for(n4), kThreads, 0, s>>>(reinterpret_cast<const float4*>(x), n4,
                                                     reinterpret_cast<uint2*>(out));
  if (n % 4 != 0) floats_to_bf16_tail<<<1, 4, 0, s>>>(x, 4 * n4, n, out);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
