// Training attention and its backward (cuda_train_kernels.cuh), in float.
//
// One warp per (row, head) for the forward and dq, one per (key row, kv
// head) for dk and dv. The warp's own row (q; q and dout; k and v) is copied
// to shared memory, and the other side is taken 32 rows at a time, a row per
// lane: each lane takes a whole dot product with the shared row (four
// partial sums over the dimensions, d % 4, then (s0 + s1) + (s2 + s3)), so a
// score costs no reduction across lanes. Then the 32 weights go to every
// lane by shuffle, in ascending order, and each lane adds weight * row to its
// dimensions (l, l + 32, ...) of the output. The forward keeps a running
// maximum and sum (online softmax: one pass over the keys), out = acc / sum,
// lse = max + log(sum). The backward recomputes the scores from q, k and the
// forward's lse: dq by query (keys ascending), dk and dv by key (the heads
// sharing its kv head ascending, then the queries that read it ascending),
// dsum = dout . out in double. Every order is fixed by the shapes, so results
// repeat bit for bit; a row's forward, dq, dk and dv do not depend on the
// other rows of its call.
#include <cstdint>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_train_kernels.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kPer = kTrainMaxHeadDim / 32;
constexpr unsigned kAll = 0xffffffffu;

// sh . g over n dimensions by one lane: sh in shared memory (16-byte
// aligned), g a row in global memory, 16-byte aligned when kVec4 (then
// n % 4 == 0).
template <bool kVec4>
__device__ __forceinline__ float dot_row(const float* sh, const float* g, int n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int d = 0;
  if constexpr (kVec4) {
    const auto* a4 = reinterpret_cast<const float4*>(sh);
    const auto* b4 = reinterpret_cast<const float4*>(g);
    for (int i = 0; i < n / 4; ++i) {
      const float4 a = a4[i], b = __ldg(b4 + i);
      s0 = fmaf(a.x, b.x, s0), s1 = fmaf(a.y, b.y, s1), s2 = fmaf(a.z, b.z, s2), s3 = fmaf(a.w, b.w, s3);
    }
    d = n;
  } else {
    for (; d + 4 <= n; d += 4) {
      s0 = fmaf(sh[d], __ldg(g + d), s0), s1 = fmaf(sh[d + 1], __ldg(g + d + 1), s1);
      s2 = fmaf(sh[d + 2], __ldg(g + d + 2), s2), s3 = fmaf(sh[d + 3], __ldg(g + d + 3), s3);
    }
  }
  for (; d < n; ++d) s0 = fmaf(sh[d], __ldg(g + d), s0);
  return (s0 + s1) + (s2 + s3);
}

// The warp's copy of a row of n floats.
__device__ __forceinline__ void stage(float* sh, const float* g, int n, int lane) {
  for (int d = lane; d < n; d += 32) sh[d] = g[d];
  __syncwarp();
}

// acc[c] += w * row[lane + 32 c] over the head's dimensions.
__device__ __forceinline__ void add_row(float (&acc)[kPer], float w, const float* row, int n, int lane) {
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int d = lane + 32 * c;
    if (d < n) acc[c] = fmaf(w, __ldg(row + d), acc[c]);
  }
}

__device__ __forceinline__ void store_row(float* dst, const float (&acc)[kPer], float mul, int n, int lane) {
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    const int d = lane + 32 * c;
    if (d < n) dst[d] = acc[c] * mul;
  }
}

// The score as the forward takes it: scale * (q . k), soft-capped.
__device__ __forceinline__ float capped(float dot, const TrainAttnDev& a) {
  const float s = dot * a.scale;
  return a.softcap > 0 ? a.softcap * tanhf(s / a.softcap) : s;
}

// dL/d(q . k) of one (query, key): p (dp - D), through the soft-cap's
// derivative, times the scale. t: the capped score.
__device__ __forceinline__ float score_grad(float t, float p, float dp, float d_sum, const TrainAttnDev& a) {
  float g = p * (dp - d_sum);
  if (a.softcap > 0) g *= 1.0f - (t / a.softcap) * (t / a.softcap);
  return g * a.scale;
}

__device__ __forceinline__ int32_t first_position(int32_t p, int32_t window) {
  return window > 0 ? max(0, p - window + 1) : 0;
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) train_attention(TrainAttnDev a) {
  __shared__ __align__(16) float q_sh[kWarps][kTrainMaxHeadDim];
  const int w = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warp = int64_t{blockIdx.x} * kWarps + w;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;  // whole warps
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head), kvh = h / (a.n_head / a.n_head_kv);
  const int hd = a.head_dim;
  const int64_t q_stride = int64_t{a.n_head} * hd, kv_stride = int64_t{a.n_head_kv} * hd;
  const int32_t pos = rw.row - rw.tok0, lo = first_position(pos, a.window);
  const float* k0 = a.k + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * hd;
  const float* v0 = a.v + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * hd;
  float* q = q_sh[w];
  stage(q, a.q + rw.row * q_stride + int64_t{h} * hd, hd, lane);
  float m = -INFINITY, sum = 0.0f, acc[kPer] = {};
  for (int32_t j0 = lo; j0 <= pos; j0 += 32) {
    const int32_t j = j0 + lane, n = min(32, pos - j0 + 1);
    const float s = j <= pos ? capped(dot_row<kVec4>(q, k0 + j * kv_stride, hd), a) : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 is in range
    const float p = j <= pos ? expf(s - m_new) : 0.0f, corr = expf(m - m_new);
    sum = sum * corr + warp_sum(p);
#pragma unroll
    for (int c = 0; c < kPer; ++c) acc[c] *= corr;
    for (int i = 0; i < n; ++i) add_row(acc, __shfl_sync(kAll, p, i), v0 + (j0 + i) * kv_stride, hd, lane);
    m = m_new;
  }
  store_row(a.out + rw.row * q_stride + int64_t{h} * hd, acc, 1.0f / sum, hd, lane);
  if (lane == 0) a.lse[int64_t{rw.row} * a.n_head + h] = m + logf(sum);
}

// dsum[row][h] = dout . out (lanes over the dimensions, a butterfly in double).
__global__ void attention_dsum(TrainAttnDev a, const float* dout, double* dsum) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head);
  const int64_t off = int64_t{rw.row} * a.n_head * a.head_dim + int64_t{h} * a.head_dim;
  double s = 0;
  for (int d = lane; d < a.head_dim; d += 32) s += static_cast<double>(dout[off + d]) * a.out[off + d];
  s = warp_sum(s);
  if (lane == 0) dsum[int64_t{rw.row} * a.n_head + h] = s;
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) attention_dq(TrainAttnDev a, const float* dout, const double* dsum,
                                                         float* dq) {
  __shared__ __align__(16) float q_sh[kWarps][kTrainMaxHeadDim];
  __shared__ __align__(16) float do_sh[kWarps][kTrainMaxHeadDim];
  const int w = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warp = int64_t{blockIdx.x} * kWarps + w;
  if (warp >= int64_t{a.n_rows} * a.n_head) return;
  const TrainRowDev rw = a.rows[warp / a.n_head];
  const int32_t h = static_cast<int32_t>(warp % a.n_head), kvh = h / (a.n_head / a.n_head_kv);
  const int hd = a.head_dim;
  const int64_t q_stride = int64_t{a.n_head} * hd, kv_stride = int64_t{a.n_head_kv} * hd;
  const int64_t off = rw.row * q_stride + int64_t{h} * hd, hr = int64_t{rw.row} * a.n_head + h;
  float *q = q_sh[w], *g = do_sh[w];
  stage(q, a.q + off, hd, lane);
  stage(g, dout + off, hd, lane);
  const float lse = a.lse[hr], d_sum = static_cast<float>(dsum[hr]);
  const int32_t pos = rw.row - rw.tok0;
  const float* k0 = a.k + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * hd;
  const float* v0 = a.v + int64_t{rw.tok0} * kv_stride + int64_t{kvh} * hd;
  float acc[kPer] = {};
  for (int32_t j0 = first_position(pos, a.window); j0 <= pos; j0 += 32) {
    const int32_t j = j0 + lane, n = min(32, pos - j0 + 1);
    float ds = 0.0f;
    if (j <= pos) {
      const float t = capped(dot_row<kVec4>(q, k0 + j * kv_stride, hd), a);
      ds = score_grad(t, expf(t - lse), dot_row<kVec4>(g, v0 + j * kv_stride, hd), d_sum, a);
    }
    for (int i = 0; i < n; ++i) add_row(acc, __shfl_sync(kAll, ds, i), k0 + (j0 + i) * kv_stride, hd, lane);
  }
  store_row(dq + off, acc, 1.0f, hd, lane);
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) attention_dkv(TrainAttnDev a, const float* dout, const double* dsum,
                                                          float* dk, float* dv) {
  __shared__ __align__(16) float k_sh[kWarps][kTrainMaxHeadDim];
  __shared__ __align__(16) float v_sh[kWarps][kTrainMaxHeadDim];
  const int w = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warp = int64_t{blockIdx.x} * kWarps + w;
  if (warp >= int64_t{a.n_rows} * a.n_head_kv) return;
  const TrainRowDev rw = a.rows[warp / a.n_head_kv];
  const int32_t kvh = static_cast<int32_t>(warp % a.n_head_kv), group = a.n_head / a.n_head_kv;
  const int hd = a.head_dim;
  const int64_t q_stride = int64_t{a.n_head} * hd, kv_stride = int64_t{a.n_head_kv} * hd;
  const int64_t kv_off = rw.row * kv_stride + int64_t{kvh} * hd;
  float *k = k_sh[w], *v = v_sh[w];
  stage(k, a.k + kv_off, hd, lane);
  stage(v, a.v + kv_off, hd, lane);
  const int32_t pos = rw.row - rw.tok0;
  // Queries at positions i >= pos read this key while first_position(i) <= pos.
  const int32_t last = a.window > 0 ? min(rw.n_tok - 1, pos + a.window - 1) : rw.n_tok - 1;
  float ak[kPer] = {}, av[kPer] = {};
  for (int32_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* q0 = a.q + int64_t{rw.tok0} * q_stride + int64_t{h} * hd;
    const float* g0 = dout + int64_t{rw.tok0} * q_stride + int64_t{h} * hd;
    for (int32_t i0 = pos; i0 <= last; i0 += 32) {
      const int32_t i = i0 + lane, n = min(32, last - i0 + 1);
      float p = 0.0f, ds = 0.0f;
      if (i <= last) {
        const int64_t hr = (int64_t{rw.tok0} + i) * a.n_head + h;
        const float t = capped(dot_row<kVec4>(k, q0 + i * q_stride, hd), a);
        p = expf(t - a.lse[hr]);
        ds = score_grad(t, p, dot_row<kVec4>(v, g0 + i * q_stride, hd), static_cast<float>(dsum[hr]), a);
      }
      for (int r = 0; r < n; ++r) {
        add_row(ak, __shfl_sync(kAll, ds, r), q0 + (i0 + r) * q_stride, hd, lane);
        add_row(av, __shfl_sync(kAll, p, r), g0 + (i0 + r) * q_stride, hd, lane);
      }
    }
  }
  store_row(dk + kv_off, ak, 1.0f, hd, lane);
  store_row(dv + kv_off, av, 1.0f, hd, lane);
}

unsigned blocks_for_warps(int64_t warps) { return static_cast<unsigned>((warps + kWarps - 1) / kWarps); }

// Whether every row the kernels read is 16-byte aligned: head_dim % 4 == 0
// and the arrays' starts.
bool rows_in_float4(const TrainAttnDev& a, const float* dout) {
  auto al = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.head_dim % 4 == 0 && al(a.q) && al(a.k) && al(a.v) && al(dout);
}

}  // namespace

void launch_train_attention(const TrainAttnDev& a, cudaStream_t s) {
  CHECK(a.head_dim > 0 && a.head_dim <= kTrainMaxHeadDim && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  const int64_t warps = int64_t{a.n_rows} * a.n_head;
  if (warps == 0) return;
  if (rows_in_float4(a, nullptr)) train_attention<true><<<blocks_for_warps(warps), kThreads, 0, s>>>(a);
  else train_attention<false><<<blocks_for_warps(warps), kThreads, 0, s>>>(a);
  SLUICE_CUDA_LAUNCHED();
}

void launch_train_attention_backward(const TrainAttnDev& a, const float* dout, float* dq, float* dk, float* dv,
                                     double* dsum, cudaStream_t s) {
  CHECK(a.head_dim > 0 && a.head_dim <= kTrainMaxHeadDim && a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0);
  const int64_t warps = int64_t{a.n_rows} * a.n_head, kv_warps = int64_t{a.n_rows} * a.n_head_kv;
  if (warps == 0) return;
  attention_dsum<<<blocks_for_warps(warps), kThreads, 0, s>>>(a, dout, dsum);
  SLUICE_CUDA_LAUNCHED();
  if (rows_in_float4(a, dout)) {
    attention_dq<true><<<blocks_for_warps(warps), kThreads, 0, s>>>(a, dout, dsum, dq);
    SLUICE_CUDA_LAUNCHED();
    attention_dkv<true><<<blocks_for_warps(kv_warps), kThreads, 0, s>>>(a, dout, dsum, dk, dv);
  } else {
    attention_dq<false><<<blocks_for_warps(warps), kThreads, 0, s>>>(a, dout, dsum, dq);
    SLUICE_CUDA_LAUNCHED();
    attention_dkv<false><<<blocks_for_warps(kv_warps), kThreads, 0, s>>>(a, dout, dsum, dk, dv);
  }
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
