#include "backend/cuda/cuda_route.cuh"

#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int kGroupThreads = 256;

// (value, id) of the better candidate: the larger value, the lower id among
// equals; id < 0: none.
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) v = v2, i = i2;
}

// A block per token.
__global__ void __launch_bounds__(kRouteThreads) route_topk_kernel(const float* logits, int n_expert, int n_used,
                                                                    int renormalize, int32_t* ids, float* weights) {
  __shared__ float red[32];
  __shared__ float best_v[kRouteThreads / 32];
  __shared__ int best_i[kRouteThreads / 32];
  __shared__ unsigned char taken[kMaxRouteExperts];
  __shared__ int chosen[kMaxRouteUsed];
  const int64_t t = blockIdx.x;
  const float* lg = logits + t * n_expert;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < n_expert; e += kRouteThreads) taken[e] = 0;
  __syncthreads();
  for (int j = 0; j < n_used; ++j) {
    float v = 0.0f;
    int i = -1;
    for (int e = tid; e < n_expert; e += kRouteThreads)
      if (!taken[e]) better(v, i, lg[e], e);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
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
  for (int e = tid; e < n_expert; e += kRouteThreads) mx = fmaxf(mx, lg[e]);
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int e = tid; e < n_expert; e += kRouteThreads) sum += expf(lg[e] - mx);
  sum = block_sum(sum, red);
  if (tid == 0) {
    float kept = 0.0f;
    for (int j = 0; j < n_used; ++j) {
      const float w = expf(lg[chosen[j]] - mx) / sum;
      ids[t * n_used + j] = chosen[j];
      weights[t * n_used + j] = w;
      kept += w;
    }
    if (renormalize)
      for (int j = 0; j < n_used; ++j) weights[t * n_used + j] /= kept;
  }
}

// One block: rows counted per expert, groups laid out in ascending ids, then
// each row placed after the rows of its expert with lower slots.
__global__ void __launch_bounds__(kGroupThreads) group_rows_kernel(const int32_t* ids, int n_slot, int n_used,
                                                                    int n_expert, const uint8_t* const* table,
                                                                    int n_groups, MatmulGroup* gate_up,
                                                                    MatmulGroup* down, int32_t* x_rows,
                                                                    int32_t* y_rows) {
  __shared__ int count[kMaxRouteExperts];
  __shared__ int base[kMaxRouteExperts];
  const int tid = static_cast<int>(threadIdx.x);
  for (int e = tid; e < n_expert; e += kGroupThreads) count[e] = 0;
  __syncthreads();
  for (int i = tid; i < n_slot; i += kGroupThreads) atomicAdd(&count[ids[i]], 1);
  __syncthreads();
  if (tid == 0) {
    int g = 0, off = 0;
    for (int e = 0; e < n_expert; ++e) {
      const int c = count[e];
      base[e] = off;
      if (c == 0) continue;
      MatmulGroup gu, dn;
      gu.w[0] = table[3 * e], gu.w[1] = table[3 * e + 1], gu.off = off, gu.count = c;
      dn.w[0] = table[3 * e + 2], dn.w[1] = nullptr, dn.off = off, dn.count = c;
      gate_up[g] = gu;
      down[g] = dn;
      ++g;
      off += c;
    }
    for (; g < n_groups; ++g) gate_up[g] = MatmulGroup{}, down[g] = MatmulGroup{};
  }
  __syncthreads();
  for (int i = tid; i < n_slot; i += kGroupThreads) {
    const int e = ids[i];
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += ids[j] == e ? 1 : 0;
    x_rows[base[e] + rank] = i / n_used;
    y_rows[base[e] + rank] = i;
  }
}

}  // namespace

void launch_route_topk(const float* logits, int64_t n_tok, int64_t n_expert, int64_t n_used, bool renormalize,
                       int32_t* ids, float* weights, cudaStream_t s) {
  CHECK(n_expert > 0 && n_expert <= kMaxRouteExperts && n_used > 0 && n_used <= kMaxRouteUsed && n_used <= n_expert);
  if (n_tok == 0) return;
  route_topk_kernel<<<static_cast<unsigned>(n_tok), kRouteThreads, 0, s>>>(
      logits, static_cast<int>(n_expert), static_cast<int>(n_used), renormalize ? 1 : 0, ids, weights);
  SLUICE_CUDA_LAUNCHED();
}

void launch_group_rows(const int32_t* ids, int64_t n_slot, int64_t n_used, int64_t n_expert,
                       const uint8_t* const* table, int64_t n_groups, MatmulGroup* gate_up, MatmulGroup* down,
                       int32_t* x_rows, int32_t* y_rows, cudaStream_t s) {
  CHECK(n_expert > 0 && n_expert <= kMaxRouteExperts && n_used > 0 && n_groups >= std::min(n_slot, n_expert));
  if (n_slot == 0) return;
  group_rows_kernel<<<1, kGroupThreads, 0, s>>>(ids, static_cast<int>(n_slot), static_cast<int>(n_used),
                                                 static_cast<int>(n_expert), table, static_cast<int>(n_groups), gate_up,
                                                 down, x_rows, y_rows);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
