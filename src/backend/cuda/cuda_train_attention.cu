// Training attention and its backward (cuda_train_kernels.cuh).
//
// One warp per (row, head): lane l holds dimensions l, l + 32, ... of the
// head (kTrainMaxHeadDim / 32 at most), a dot product is the lanes' partial
// sums (double) reduced over a fixed butterfly, so every lane has it. The
// forward reads the keys twice: their maximum score, then the sum of
// e^(s - max) and of e^(s - max) v; out = the second over the first. The
// backward: dq by query (keys ascending), dk and dv by key (the heads sharing
// its kv head ascending, then the queries that read it ascending), the
// scores recomputed from q, k and the forward's lse.
#include <cstdint>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_train_kernels.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kPer = kTrainMaxHeadDim / 32;

// a . b over head_dim, every lane gets it.
__device__ __forceinline__ double dot(const float* a, const float* b, int head_dim, int lane) {
  double s = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = lane + 32 * k;
    if (d < head_dim) s += static_cast<double>(a[d]) * b[d];
  }
  return warp_sum(s);
}

// scale * q . k, soft-capped.
__device__ __forceinline__ double score(const float* q, const float* k, const TrainAttnDev& a, int lane) {
  double s = dot(q, k, a.head_dim, lane) * static_cast<double>(a.scale);
  if (a.softcap > 0) s = a.softcap * tanh(s / a.softcap);
  return s;
}

__device__ __forceinline__ int32_t first_position(int32_t p, int32_t window) {
  return window > 0 ? max(0, p - window + 1) : 0;
}

__global__ void train_attention(TrainAttnDev a) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;  // whole warps
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head), kvh = h / (a.n_head / a.n_head_kv);
  const int64_t q_stride = int64_t{a.n_head} * a.head_dim, kv_stride = int64_t{a.n_head_kv} * a.head_dim;
  const float* q = a.q + rw.row * q_stride + int64_t{h} * a.head_dim;
  const int32_t pos = rw.row - rw.tok0, lo = first_position(pos, a.window);
  const float* k0 = a.k + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * a.head_dim;
  const float* v0 = a.v + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * a.head_dim;
  double m = -INFINITY;
  for (int32_t j = lo; j <= pos; ++j) m = fmax(m, score(q, k0 + j * kv_stride, a, lane));
  double sum = 0, acc[kPer] = {};
  for (int32_t j = lo; j <= pos; ++j) {
    const double e = exp(score(q, k0 + j * kv_stride, a, lane) - m);
    sum += e;
    const float* v = v0 + j * kv_stride;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int d = lane + 32 * k;
      if (d < a.head_dim) acc[k] += e * v[d];
    }
  }
  float* out = a.out + rw.row * q_stride + int64_t{h} * a.head_dim;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = lane + 32 * k;
    if (d < a.head_dim) out[d] = static_cast<float>(acc[k] / sum);
  }
  if (lane == 0) a.lse[int64_t{rw.row} * a.n_head + h] = static_cast<float>(m + log(sum));
}

// dsum[row][h] = dout . out.
__global__ void attention_dsum(TrainAttnDev a, const float* dout, double* dsum) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head);
  const int64_t off = int64_t{rw.row} * a.n_head * a.head_dim + int64_t{h} * a.head_dim;
  const double d = dot(dout + off, a.out + off, a.head_dim, lane);
  if (lane == 0) dsum[int64_t{rw.row} * a.n_head + h] = d;
}

// ds for query row `row` (head h, position pos in its sequence) and key at k, v:
// p = e^(s - lse), ds = p (dout . v - D) (soft-cap's derivative) scale.
struct Grad {
  double p, ds;
};
__device__ __forceinline__ Grad grad(const TrainAttnDev& a, const float* q, const float* dout, double lse, double dsum,
                                     const float* k, const float* v, int lane) {
  const double s = score(q, k, a, lane);
  const double p = exp(s - lse);
  double ds = p * (dot(dout, v, a.head_dim, lane) - dsum);
  if (a.softcap > 0) ds *= 1.0 - (s / a.softcap) * (s / a.softcap);
  return {p, ds * static_cast<double>(a.scale)};
}

__global__ void attention_dq(TrainAttnDev a, const float* dout, const double* dsum, float* dq) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head), kvh = h / (a.n_head / a.n_head_kv);
  const int64_t q_stride = int64_t{a.n_head} * a.head_dim, kv_stride = int64_t{a.n_head_kv} * a.head_dim;
  const int64_t off = rw.row * q_stride + int64_t{h} * a.head_dim;
  const int64_t hr = int64_t{rw.row} * a.n_head + h;
  const double lse = a.lse[hr], ds_sum = dsum[hr];
  const int32_t pos = rw.row - rw.tok0;
  const float* k0 = a.k + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * a.head_dim;
  const float* v0 = a.v + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * a.head_dim;
  double acc[kPer] = {};
  for (int32_t j = first_position(pos, a.window); j <= pos; ++j) {
    const float* k = k0 + j * kv_stride;
    const Grad g = grad(a, a.q + off, dout + off, lse, ds_sum, k, v0 + j * kv_stride, lane);
#pragma unroll
    for (int c = 0; c < kPer; ++c) {
      const int d = lane + 32 * c;
      if (d < a.head_dim) acc[c] += g.ds * k[d];
    }
  }
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int d = lane + 32 * c;
    if (d < a.head_dim) dq[off + d] = static_cast<float>(acc[c]);
  }
}

__global__ void attention_dkv(TrainAttnDev a, const float* dout, const double* dsum, float* dk, float* dv) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= int64_t{a.n_rows} * a.n_head_kv) return;
  const TrainRowDev rw = a.rows[warp / a.n_head_kv];
  const int32_t kvh = static_cast<int32_t>(warp % a.n_head_kv), group = a.n_head / a.n_head_kv;
  const int64_t q_stride = int64_t{a.n_head} * a.head_dim, kv_stride = int64_t{a.n_head_kv} * a.head_dim;
  const int64_t kv_off = rw.row * kv_stride + int64_t{kvh} * a.head_dim;
  const float* k = a.k + kv_off;
  const float* v = a.v + kv_off;
  const int32_t pos = rw.row - rw.tok0;
  // Queries at positions i >= pos read this key while first_position(i) <= pos.
  const int32_t last = a.window > 0 ? min(rw.n_tok - 1, pos + a.window - 1) : rw.n_tok - 1;
  double ak[kPer] = {}, av[kPer] = {};
  for (int32_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int32_t i = pos; i <= last; ++i) {
      const int64_t row = int64_t{rw.tok0} + i;
      const int64_t off = row * q_stride + int64_t{h} * a.head_dim;
      const int64_t hr = row * a.n_head + h;
      const Grad g = grad(a, a.q + off, dout + off, a.lse[hr], dsum[hr], k, v, lane);
#pragma unroll
      for (int c = 0; c < kPer; ++c) {
        const int d = lane + 32 * c;
        if (d < a.head_dim) {
          ak[c] += g.ds * a.q[off + d];
          av[c] += g.p * dout[off + d];
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int d = lane + 32 * c;
    if (d < a.head_dim) {
      dk[kv_off + d] = static_cast<float>(ak[c]);
      dv[kv_off + d] = static_cast<float>(av[c]);
    }
  }
}

unsigned blocks_for_warps(int64_t warps) { return static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads); }

}  // namespace

void launch_train_attention(const TrainAttnDev& a, cudaStream_t s) {
  CHECK(a.head_dim > 0 && a.head_dim <= kTrainMaxHeadDim && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  const int64_t warps = int64_t{a.n_rows} * a.n_head;
  if (warps == 0) return;
  train_attention<<<blocks_for_warps(warps), kThreads, 0, s>>>(a);
  SLUICE_CUDA_LAUNCHED();
}

void launch_train_attention_backward(const TrainAttnDev& a, const float* dout, float* dq, float* dk, float* dv,
                                     double* dsum, cudaStream_t s) {
  CHECK(a.head_dim > 0 && a.head_dim <= kTrainMaxHeadDim && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  const int64_t warps = int64_t{a.n_rows} * a.n_head;
  if (warps == 0) return;
  attention_dsum<<<blocks_for_warps(warps), kThreads, 0, s>>>(a, dout, dsum);
  SLUICE_CUDA_LAUNCHED();
  attention_dq<<<blocks_for_warps(warps), kThreads, 0, s>>>(a, dout, dsum, dq);
  SLUICE_CUDA_LAUNCHED();
  attention_dkv<<<blocks_for_warps(int64_t{a.n_rows} * a.n_head_kv), kThreads, 0, s>>>(a, dout, dsum, dk, dv);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
