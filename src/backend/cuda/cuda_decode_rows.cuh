// Rows of a weight matrix decoded into a dense array, for the kernels that
// read weights as plain numbers: the bf16 tiles the tensor cores multiply in
// prefill (cuda_to_bf16.cu) and the f32 panels of training's transposed
// matmul (cuda_train_kernels.cu). Each block of the decoder D (cuda_dequant.cuh)
// is split over its kLanes threads, each decoding 8 elements, stored as
// float (f32) or as bf16 bits (uint16_t), round to nearest even.
//
//   out[r][i] = dequantize(w row row0 + r)[i],   r < n_rows, i < n_in
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/op_types.h"
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

// Rows row0 .. row0 + n_rows - 1 of w (GGUF rows, n_in a multiple of D::kElems) into out, on s.
template <class D, class Out>
void launch_decode_rows(const WeightView& w, int64_t row0, int64_t n_rows, Out* out, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t rb = static_cast<int64_t>(row_bytes(w.type, w.n_in)), n_blocks = w.n_in / D::kElems;
  const int64_t items = n_rows * n_blocks * D::kLanes;
  decode_rows<D, Out><<<grid_for(items, kThreads), kThreads, 0, s>>>(w.data + row0 * rb, rb, n_blocks, items, w.n_in,
                                                                    out);
}

}  // namespace sluice::cuda
