// The 8-bit quantization of x (cuda_matmul_q8.cuh's QuantizedX) as device
// code, for the kernels that quantize a row they hold: the norm, the
// activation, the quantize kernel itself and the router's kernel
// (cuda_route.cu). Included by .cu files only.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_rows.cuh"

namespace sluice::cuda {

// Lane i of a warp holds element i of block b of token t: quantize it into qx.
__device__ __forceinline__ void quantize_lane(float v, int64_t t, int64_t b, int lane, const QuantizedX& qx) {
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int q = d > 0.0f ? __float2int_rn(v / d) : 0;
  qx.q[t * qx.n_in + b * 32 + lane] = static_cast<int8_t>(q);
  const float sum = warp_sum(static_cast<float>(q));
  if (lane == 0) {
    qx.d[t * (qx.n_in / 32) + b] = d;
    qx.s[t * (qx.n_in / 32) + b] = d * sum;
  }
}

}  // namespace sluice::cuda
