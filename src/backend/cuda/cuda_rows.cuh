// Device helpers for kernels that take one token's row per thread block
// (norms, the quantization of x, training's rows): warp and block sums and
// maxima, and a row held in registers so that it is read from memory once.
//
// Register order: with W warps, thread (warp, lane) holds the elements
//   (warp + k * W) * 32 + lane,   k < K,
// so warp w owns the 32-element blocks w, w + W, ... (the 8-bit quantization's
// blocks: one warp each) and every load of a warp is 128 contiguous bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace sluice::cuda {

// Sum and max over a warp, float or double; every lane gets it.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (kMax false) or max over the thread block; every thread gets it.
// `red`: [32] shared.
template <bool kMax, class T>
__device__ __forceinline__ T block_reduce(T v, T* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = (blockDim.x + 31) >> 5;
  auto across = [](T x) { return kMax ? warp_max(x) : warp_sum(x); };
  v = across(v);
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return across(lane < n_warp ? red[lane] : (kMax ? T{-INFINITY} : T{0}));
}

template <class T>
__device__ __forceinline__ T block_sum(T v, T* red) { return block_reduce<false>(v, red); }
template <class T>
__device__ __forceinline__ T block_max(T v, T* red) { return block_reduce<true>(v, red); }

// Element k of this thread's share of a row (register order above).
__device__ __forceinline__ int64_t row_elem(int k) {
  return (static_cast<int64_t>(threadIdx.x >> 5) + static_cast<int64_t>(k) * (blockDim.x >> 5)) * 32 +
         (threadIdx.x & 31);
}

// v = x (+ add, the sum also written to x_sum) and wv = w for this thread's K
// elements of a row of n (0 past n); returns the row's sum of squares, for
// every thread. w is read here, before the reduction, so that its round trip
// overlaps x's.
template <int K>
__device__ __forceinline__ float load_row(const float* x, const float* add, float* x_sum, const float* w, int64_t n,
                                          float (&v)[K], float (&wv)[K], float* red) {
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = row_elem(k);
    float a = 0.0f, b = 0.0f;
    if (i < n) {
      a = x[i];
      b = w[i];
      if (add) {
        a += add[i];
        x_sum[i] = a;
      }
    }
    v[k] = a;
    wv[k] = b;
    ss += a * a;
  }
  return block_sum(ss, red);
}

// Threads and registers per thread for a row of n: one warp per 32 elements
// up to 32 warps, then K = 1, 2, 4, 8 or 16 elements a thread; K = 0 above
// 16384 (the kernels loop over memory instead).
struct RowShape {
  int threads = 32;
  int k = 1;
};
inline RowShape row_shape(int64_t n) {
  const int64_t blocks = (n + 31) / 32;
  RowShape s;
  s.threads = static_cast<int>(blocks < 32 ? blocks : 32) * 32;
  const int64_t per = (blocks + 31) / 32;
  s.k = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= 8 ? 8 : per <= 16 ? 16 : 0;
  return s;
}

// Calls f(std::integral_constant<int, K>{}) for the shape's K and returns
// true; returns false, calling nothing, for K == 0 (rows read from memory).
template <class F>
bool with_row_regs(const RowShape& s, F&& f) {
  switch (s.k) {
    case 1: f(std::integral_constant<int, 1>{}); return true;
    case 2: f(std::integral_constant<int, 2>{}); return true;
    case 4: f(std::integral_constant<int, 4>{}); return true;
    case 8: f(std::integral_constant<int, 8>{}); return true;
    case 16: f(std::integral_constant<int, 16>{}); return true;
    default: return false;
  }
}

}  // namespace sluice::cuda
