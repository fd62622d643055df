// Conversions to BF16 (cuda_to_bf16.cuh).
//
// GGUF rows: one thread per (row, block, lane) piece of 8 elements, in the
// decoders' order (cuda_dequant.cuh), so the lanes of a warp read one
// contiguous span of blocks; a piece lands as two runs of 4 BF16 (8-byte
// stores) at the decoder's x_off positions, and a warp's stores cover whole
// blocks of the output row. Split Q4_0 / Q8_0: one thread per block, 16 or
// 32 quant bytes in 16-byte loads, 64 bytes of BF16 out in 16-byte stores.
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

// Split layout: block i (rows one after the other) has its quants at
// quants + i * kQ and its f16 scale at scales[i].  Q4_0: (q - 8) * d, element
// j < 16 the low nibble of byte j, j + 16 its high nibble.  Q8_0: q * d.
template <bool kQ8>
__global__ void split_to_bf16(const uint8_t* quants, const uint16_t* scales, int64_t n_items, uint16_t* out) {
  constexpr int kQ = kQ8 ? 32 : 16;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_items; i += int64_t{gridDim.x} * blockDim.x) {
    const float d = __half2float(__ushort_as_half(__ldg(scales + i)));
    uint32_t q[kQ / 4];
#pragma unroll
    for (int k = 0; k < kQ / 16; ++k) {
      const uint4 u = ld128_stream(quants + i * kQ + 16 * k);
      q[4 * k] = u.x, q[4 * k + 1] = u.y, q[4 * k + 2] = u.z, q[4 * k + 3] = u.w;
    }
    float v[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      if constexpr (kQ8) {
        v[j] = s8(q[j / 4], j % 4) * d;
      } else {
        const uint32_t byte = (q[(j % 16) / 4] >> (8 * (j % 4))) & 0xffu;
        v[j] = (static_cast<float>(j < 16 ? byte & 15u : byte >> 4) - 8.0f) * d;
      }
    }
    uint4* o = reinterpret_cast<uint4*>(out + i * 32);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      o[k] = make_uint4(pack2(v[8 * k], v[8 * k + 1]), pack2(v[8 * k + 2], v[8 * k + 3]), pack2(v[8 * k + 4], v[8 * k + 5]),
                        pack2(v[8 * k + 6], v[8 * k + 7]));
  }
}

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

bool to_bf16_takes(const WeightView& w) {
  const int elems = converted_block_elems(w.type);
  if (elems == 0 || w.n_in <= 0 || w.n_in % elems != 0) return false;
  const auto addr = reinterpret_cast<uintptr_t>(w.data);
  if (w.layout == WeightLayout::kSplitScales)
    return (w.type == DType::kQ4_0 || w.type == DType::kQ8_0) && addr % 16 == 0;
  if (w.layout != WeightLayout::kRows) return false;
  if (elems == 8) return addr % 16 == 0;
  const size_t block = row_bytes(w.type, elems);
  return addr % (block % 4 == 0 ? 4 : 2) == 0;
}

void launch_weights_to_bf16(const WeightView& w, int64_t row0, int64_t n_rows, uint16_t* out, cudaStream_t s) {
  CHECK(to_bf16_takes(w) && row0 >= 0 && row0 + n_rows <= w.n_out && reinterpret_cast<uintptr_t>(out) % 16 == 0);
  if (n_rows == 0) return;
  if (w.layout == WeightLayout::kSplitScales) {
    const bool q8 = w.type == DType::kQ8_0;
    const int64_t qb = q8 ? 32 : 16, n_b = w.n_in / 32, items = n_rows * n_b;
    const uint8_t* quants = w.data + row0 * n_b * qb;
    const auto* scales = reinterpret_cast<const uint16_t*>(w.data + w.n_out * n_b * qb) + row0 * n_b;
    if (q8) split_to_bf16<true><<<grid_for(items), kThreads, 0, s>>>(quants, scales, items, out);
    else split_to_bf16<false><<<grid_for(items), kThreads, 0, s>>>(quants, scales, items, out);
    SLUICE_CUDA_LAUNCHED();
    return;
  }
  const bool decoded = with_decoder(w.type, [&]<class D>() { launch_decode_rows<D>(w, row0, n_rows, out, s); });
  CHECK(decoded);
  SLUICE_CUDA_LAUNCHED();
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
