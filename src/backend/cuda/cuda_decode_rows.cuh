// Rows of a weight matrix decoded into a dense array, for the kernels that
// read weights as plain numbers: the bf16 tiles the tensor cores multiply in
// prefill (cuda_to_bf16.cu) and the f32 panels of training's transposed
// matmul (cuda_train_kernels.cu). GGUF rows: each block of the decoder D
// (cuda_dequant.cuh) is split over its kLanes threads, each decoding 8
// elements. Q4_0 / Q8_0 with their scales split off (quant/split_scales.h):
// one thread a block. Stored as float (f32) or as bf16 bits (uint16_t),
// round to nearest even.
//
//   out[r][i] = dequantize(w row row0 + r)[i],   r < n_rows, i < n_in
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/op_types.h"
#include "base/check.h"
#include "quant/dtype.h"

namespace sluice::cuda {

// Enough blocks of `threads` to fill the GPU several times over, each walking
// a grid stride over `items`.
inline unsigned grid_for(int64_t items, int threads = 256) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 132 * 32 ? (blocks > 0 ? blocks : 1) : 132 * 32);
}

// Two floats as bf16 bits, a (the lower address) in the low half.
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Four decoded values to o (16-byte aligned for f32, 8 for bf16).
__device__ __forceinline__ void store4(float* o, const float* v) {
  *reinterpret_cast<float4*>(o) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(uint16_t* o, const float* v) {
  *reinterpret_cast<uint2*>(o) = make_uint2(pack2(v[0], v[1]), pack2(v[2], v[3]));
}

// Eight decoded values to o (16-byte aligned).
__device__ __forceinline__ void store8(float* o, const float* v) {
  store4(o, v);
  store4(o + 4, v + 4);
}
__device__ __forceinline__ void store8(uint16_t* o, const float* v) {
  *reinterpret_cast<uint4*>(o) = make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
}

template <class D, class Out>
__global__ void decode_rows(const uint8_t* w, int64_t row_bytes, int64_t n_blocks, int64_t n_items, int64_t n_in,
                            Out* out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_items; i += int64_t{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>(i % D::kLanes);
    const int64_t rb = i / D::kLanes, row = rb / n_blocks, b = rb % n_blocks;
    const typename D::Raw raw = D::load(w + row * row_bytes + b * D::kBytes, c);
    float v[8];
    D::decode(raw, c, v);
    Out* o = out + row * n_in + b * D::kElems;
    store4(o + D::x_off(c, 0), v);
    store4(o + D::x_off(c, 1), v + 4);
  }
}

// Split layout: block b (rows one after the other) has its quants at
// quants + b * kQ and its f16 scale at scales[b]. Four threads a block, thread
// c writing elements 8c .. 8c + 7 from 8 bytes of quants, so a warp's stores
// cover 8 blocks' outputs end to end (bf16: one 16-byte store a thread, 512
// bytes a warp, every line whole):
//   Q8_0: q[8c .. 8c + 7] * d                 (bytes 8c .. 8c + 7)
//   Q4_0: (nibble - 8) * d, element j < 16 the low nibble of byte j and j + 16
//         its high one: thread c reads bytes 8 (c % 2) .. + 7, low nibbles for c < 2
template <bool kQ8, class Out>
__global__ void decode_split(const uint8_t* quants, const uint16_t* scales, int64_t n_items, Out* out) {
  constexpr int kQ = kQ8 ? 32 : 16;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_items; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = i / 4;
    const int c = static_cast<int>(i % 4);
    const float d = __half2float(__ushort_as_half(__ldg(scales + b)));
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(quants + b * kQ + 8 * (kQ8 ? c : c % 2)));
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t byte = ((k < 4 ? u.x : u.y) >> (8 * (k % 4))) & 0xffu;
      if constexpr (kQ8) {
        v[k] = static_cast<float>(static_cast<int8_t>(byte)) * d;
      } else {
        v[k] = (static_cast<float>(c < 2 ? byte & 15u : byte >> 4) - 8.0f) * d;
      }
    }
    store8(out + b * 32 + 8 * c, v);
  }
}

// Whether rows of this type and layout decode here: GGUF rows of every type
// with a decoder but F32, and Q4_0 / Q8_0 with their scales split off.
inline bool decodes_rows(DType type, WeightLayout layout) {
  if (layout == WeightLayout::kSplitScales) return type == DType::kQ4_0 || type == DType::kQ8_0;
  return layout == WeightLayout::kRows && converted_block_elems(type) != 0;
}

// decodes_rows, with whole blocks a row and w.data aligned as the loads need.
inline bool decodes_rows(const WeightView& w) {
  if (!decodes_rows(w.type, w.layout)) return false;
  const int elems = converted_block_elems(w.type);
  if (w.n_in <= 0 || w.n_in % elems != 0) return false;
  const auto addr = reinterpret_cast<uintptr_t>(w.data);
  if (w.layout == WeightLayout::kSplitScales || elems == 8) return addr % 16 == 0;
  const size_t block = row_bytes(w.type, elems);
  return addr % (block % 4 == 0 ? 4 : 2) == 0;
}

// Rows row0 .. row0 + n_rows - 1 of w (decodes_rows(w)) into out (16-byte aligned), on s.
template <class Out>
void launch_decode_rows(const WeightView& w, int64_t row0, int64_t n_rows, Out* out, cudaStream_t s) {
  CHECK(decodes_rows(w) && row0 >= 0 && row0 + n_rows <= w.n_out && reinterpret_cast<uintptr_t>(out) % 16 == 0);
  if (n_rows == 0) return;
  constexpr int kThreads = 256;
  if (w.layout == WeightLayout::kSplitScales) {
    const bool q8 = w.type == DType::kQ8_0;
    const int64_t qb = q8 ? 32 : 16, n_b = w.n_in / 32, items = n_rows * n_b * 4;  // 4 threads a block
    const uint8_t* quants = w.data + row0 * n_b * qb;
    const auto* scales = reinterpret_cast<const uint16_t*>(w.data + w.n_out * n_b * qb) + row0 * n_b;
    if (q8) decode_split<true><<<grid_for(items, kThreads), kThreads, 0, s>>>(quants, scales, items, out);
    else decode_split<false><<<grid_for(items, kThreads), kThreads, 0, s>>>(quants, scales, items, out);
    SLUICE_CUDA_LAUNCHED();
    return;
  }
  const bool decoded = with_decoder(w.type, [&]<class D>() {
    const int64_t rb = static_cast<int64_t>(row_bytes(w.type, w.n_in)), n_blocks = w.n_in / D::kElems;
    const int64_t items = n_rows * n_blocks * D::kLanes;
    decode_rows<D, Out><<<grid_for(items, kThreads), kThreads, 0, s>>>(w.data + row0 * rb, rb, n_blocks, items,
                                                                      w.n_in, out);
  });
  CHECK(decoded);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
