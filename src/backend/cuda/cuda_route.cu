#include "backend/cuda/cuda_route.cuh"

#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_quantize.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kRouteThreads = 128;

// (value, id) of the better candidate: the larger value, the lower id among
// equals; id < 0: none.
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) v = v2, i = i2;
}

// Token t's top-k into r.ids / r.weights.
__device__ void route_token(const RouteDev& r, int64_t t, unsigned char* taken, int* chosen, float* red) {
  __shared__ float best_v[kRouteThreads / 32];
  __shared__ int best_i[kRouteThreads / 32];
  const float* lg = r.logits + t * r.n_expert;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < r.n_expert; e += kRouteThreads) taken[e] = 0;
  __syncthreads();
  for (int j = 0; j < r.n_used; ++j) {
    float v = 0.0f;
    int i = -1;
    for (int e = tid; e < r.n_expert; e += kRouteThreads)
      if (!taken[e]) better(v, i, lg[e], e);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
      const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
      better(v, i, v2, i2);
    }
    if (lane == 0) best_v[warp] = v, best_i[warp] = i;
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kRouteThreads / 32; ++w) better(v, i, best_v[w], best_i[w]);
      chosen[j] = i;
      taken[i] = 1;
    }
    __syncthreads();
  }
  float mx = -INFINITY;
  for (int e = tid; e < r.n_expert; e += kRouteThreads) mx = fmaxf(mx, lg[e]);
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int e = tid; e < r.n_expert; e += kRouteThreads) sum += expf(lg[e] - mx);
  sum = block_sum(sum, red);
  if (tid == 0) {
    float kept = 0.0f;
    for (int j = 0; j < r.n_used; ++j) {
      const float w = expf(lg[chosen[j]] - mx) / sum;
      r.ids[t * r.n_used + j] = chosen[j];
      r.weights[t * r.n_used + j] = w;
      kept += w;
    }
    if (r.renormalize)
      for (int j = 0; j < r.n_used; ++j) r.weights[t * r.n_used + j] /= kept;
  }
}

// Every token's ids (other blocks wrote them: read past L1) into the tables.
__device__ void group_rows(const RouteDev& r, int n_slot, int* count, int* base) {
  const int tid = static_cast<int>(threadIdx.x);
  const volatile int32_t* ids = r.ids;
  for (int e = tid; e < r.n_expert; e += kRouteThreads) count[e] = 0;
  __syncthreads();
  for (int i = tid; i < n_slot; i += kRouteThreads) atomicAdd(&count[ids[i]], 1);
  __syncthreads();
  if (tid == 0) {
    int g = 0, off = 0;
    for (int e = 0; e < r.n_expert; ++e) {
      const int c = count[e];
      base[e] = off;
      if (c == 0) continue;
      MatmulGroup gu, dn;
      gu.w[0] = r.table[3 * e], gu.w[1] = r.table[3 * e + 1], gu.off = off, gu.count = c;
      dn.w[0] = r.table[3 * e + 2], dn.w[1] = nullptr, dn.off = off, dn.count = c;
      r.gate_up[g] = gu;
      r.down[g] = dn;
      ++g;
      off += c;
    }
    for (; g < r.n_groups; ++g) r.gate_up[g] = MatmulGroup{}, r.down[g] = MatmulGroup{};
  }
  __syncthreads();
  for (int i = tid; i < n_slot; i += kRouteThreads) {
    const int e = ids[i];
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += ids[j] == e ? 1 : 0;
    r.x_rows[base[e] + rank] = i / r.n_used;
    r.y_rows[base[e] + rank] = i;
  }
}

__global__ void __launch_bounds__(kRouteThreads) route_kernel(const RouteDev r) {
  __shared__ float red[32];
  __shared__ unsigned char taken[kMaxRouteExperts];
  __shared__ int chosen[kMaxRouteUsed];
  __shared__ int count[kMaxRouteExperts], base[kMaxRouteExperts];
  __shared__ bool last;
  const int64_t t = blockIdx.x;
  route_token(r, t, taken, chosen, red);
  if (r.qx.q) {  // warp w quantizes the 32-blocks w, w + 4, ... of x[t]
    const int lane = static_cast<int>(threadIdx.x) % 32;
    for (int b = static_cast<int>(threadIdx.x) / 32; b < r.n_embd / 32; b += kRouteThreads / 32)
      quantize_lane(r.x[t * r.n_embd + b * 32 + lane], t, b, lane, r.qx);
  }
  // The last block to finish groups every token's rows.
  __threadfence();  // this block's ids, before its count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(r.counter, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  group_rows(r, static_cast<int>(gridDim.x) * r.n_used, count, base);
  if (threadIdx.x == 0) *r.counter = 0;  // for the next launch
}

}  // namespace

void launch_route(const RouteDev& r, int64_t n_tok, cudaStream_t s) {
  CHECK(r.n_expert > 0 && r.n_expert <= kMaxRouteExperts && r.n_used > 0 && r.n_used <= kMaxRouteUsed &&
        r.n_used <= r.n_expert && r.counter && r.table);
  CHECK(r.n_groups >= std::min<int64_t>(n_tok * r.n_used, r.n_expert));
  CHECK(!r.qx.q || (r.x && r.n_embd % 32 == 0 && r.qx.n_in == r.n_embd));
  if (n_tok == 0) return;
  route_kernel<<<static_cast<unsigned>(n_tok), kRouteThreads, 0, s>>>(r);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
