#include "backend/cuda/cuda_kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_rows.cuh"

namespace sluice::cuda {
namespace {

constexpr int kBlock = 256;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kBlock - 1) / kBlock, 65535 * 4)); }

// ---- norms, activations, add ------------------------------------------------

__device__ __forceinline__ uint16_t bf16_rn(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// Row t: x_t = x + (rows ? rows[t] : t) * n; with `add` (rows null), x_t +=
// add_t is written back first. out[t] = x_t * inv_rms * w, and its BF16
// rounding in out16 when set. K > 0: the row is read once into registers
// (cuda_rows.cuh); K == 0: long rows, read twice.
template <int K>
__global__ void rmsnorm_kernel(const float* x, const int64_t* rows, const float* add, const float* w, float eps,
                               float* out, int64_t n, uint16_t* out16) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const float* xt = x + (rows ? rows[t] : t) * n;
  float* xs = const_cast<float*>(xt);  // written only with `add`, when x is the caller's writable rows
  const float* at = add ? add + t * n : nullptr;
  float* ot = out + t * n;
  uint16_t* o16 = out16 ? out16 + t * n : nullptr;
  if constexpr (K > 0) {
    float v[K], wv[K];
    const float ss = load_row<K>(xt, at, xs, w, n, v, wv, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = row_elem(k);
      if (i >= n) continue;
      const float y = v[k] * inv * wv[k];
      ot[i] = y;
      if (o16) o16[i] = bf16_rn(y);
    }
  } else {
    float ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float a = xt[i];
      if (at) xs[i] = a = a + at[i];
      ss += a * a;
    }
    ss = block_sum(ss, red);  // its barrier also orders the writes to xs before the reads below
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float y = xt[i] * inv * w[i];
      ot[i] = y;
      if (o16) o16[i] = bf16_rn(y);
    }
  }
}

__device__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

__global__ void glu_kernel(float* gate, const float* up, int64_t n, int gelu, uint16_t* out16) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    const float h = (gelu ? gelu_tanh(g) : g / (1.0f + expf(-g))) * up[i];
    gate[i] = h;
    if (out16) out16[i] = bf16_rn(h);
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) x[i] += y[i];
}

// ---- KV rows ------------------------------------------------------------------

// Address of element e of row `row` in one layer's K (or V).
__device__ uint8_t* kv_elem(uint8_t* base, const KvLayerDev& kv, int64_t row, int e) {
  const int64_t b = row / kv.block_size, slot = row % kv.block_size;
  const int s = e / kv.slice_len, j = e % kv.slice_len;
  return base + b * kv.block_bytes + (int64_t{s} * kv.block_size + slot) * kv.slice_bytes + int64_t{j} * kv.elem_bytes;
}

__device__ void kv_put(uint8_t* p, int elem_bytes, float v) {
  if (elem_bytes == 4) *reinterpret_cast<float*>(p) = v;
  else *reinterpret_cast<__half*>(p) = __float2half_rn(v);
}

__device__ float kv_get(const uint8_t* p, int elem_bytes) {
  return elem_bytes == 4 ? *reinterpret_cast<const float*>(p) : __half2float(*reinterpret_cast<const __half*>(p));
}

// Per-head RMSNorm of n_head heads of x, a warp per head.
__device__ void head_norms(float* x, const float* w, int n_head, int head_dim, float eps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
  for (int h = warp; h < n_head; h += n_warp) {
    float* xh = x + h * head_dim;
    float ss = 0;
    for (int i = lane; i < head_dim; i += 32) ss += xh[i] * xh[i];
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
    for (int i = lane; i < head_dim; i += 32) xh[i] = xh[i] * inv * w[i];
  }
}

// One token per block: biases, q/k norms, RoPE, then K and V into the store.
__global__ void qkv_store_kernel(QkvStoreDev a) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const int t = blockIdx.x;
  const int n_q = a.n_head * a.head_dim, n_kv = a.n_head_kv * a.head_dim;
  float* q = a.q + int64_t{t} * n_q;
  float* k = a.k + int64_t{t} * n_kv;
  float* v = a.v + int64_t{t} * n_kv;
  for (int i = threadIdx.x; i < n_q; i += blockDim.x)
    if (a.bq) q[i] += a.bq[i];
  for (int i = threadIdx.x; i < n_kv; i += blockDim.x) {
    if (a.bk) k[i] += a.bk[i];
    if (a.bv) v[i] += a.bv[i];
  }
  // The barriers only where a step writes what another thread reads next
  // (the conditions are the same for the whole block).
  if (a.bq || a.bk) __syncthreads();
  if (a.q_norm) head_norms(q, a.q_norm, a.n_head, a.head_dim, a.norm_eps);
  if (a.k_norm) head_norms(k, a.k_norm, a.n_head_kv, a.head_dim, a.norm_eps);
  if (a.q_norm || a.k_norm) __syncthreads();
  // RoPE, then K and V into the store. A thread stores the k pair it rotated
  // and the v and unrotated k elements it added a bias to (if any), so no
  // barrier is needed between. Row `row` of the store: element e at slice
  // e / slice_len of its block, place e % slice_len (kv_elem, unrolled).
  const int64_t row = a.kv_rows[t];
  const int64_t row_off = row / a.kv.block_size * a.kv.block_bytes + row % a.kv.block_size * a.kv.slice_bytes;
  const int64_t slice_step = int64_t{a.kv.block_size} * a.kv.slice_bytes;
  auto store = [&](uint8_t* base, int e, float val) {
    kv_put(base + row_off + e / a.kv.slice_len * slice_step + int64_t{e % a.kv.slice_len} * a.kv.elem_bytes,
           a.kv.elem_bytes, val);
  };
  const int half = a.n_rot / 2;
  const float* cs = a.cos_sin + int64_t{t} * a.n_rot;
  for (int idx = threadIdx.x; idx < (a.n_head + a.n_head_kv) * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    const bool is_k = h >= a.n_head;
    float* xh = is_k ? k + (h - a.n_head) * a.head_dim : q + h * a.head_dim;
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const int i0 = a.rope == RopeLayout::kAdjacent ? 2 * i : i;
    const int i1 = a.rope == RopeLayout::kAdjacent ? 2 * i + 1 : i + half;
    const float x0 = xh[i0], x1 = xh[i1];
    const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
    xh[i0] = y0;
    xh[i1] = y1;
    if (is_k) {
      const int e0 = (h - a.n_head) * a.head_dim;
      store(a.kv.k, e0 + i0, y0);
      store(a.kv.k, e0 + i1, y1);
    }
  }
  for (int e = threadIdx.x; e < n_kv; e += blockDim.x) {
    store(a.kv.v, e, v[e]);
    if (e % a.head_dim >= a.n_rot) store(a.kv.k, e, k[e]);  // past the rotated dims
  }
}

// ---- attention ----------------------------------------------------------------
//
// Block (query, head, split): 8 warps walk the split's key positions, one key
// per warp at a time; lane l holds dims l*DPL .. l*DPL+DPL-1 of q, of the
// running output and of each K/V row. Online softmax per warp, then the warps
// are merged in shared memory. With n_split > 1 each block writes its
// unnormalized (max, sum, acc) to `partial` and attention_combine merges them.

constexpr int kAttnWarps = 8;

template <int DPL>
__global__ void attention_kernel(AttentionDev a) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const AttnQuery qy = a.queries[blockIdx.x];
  const int h = blockIdx.y, split = blockIdx.z;
  const int group = a.n_head / a.n_head_kv, kvh = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int d0 = lane * DPL;
  float qv[DPL], acc[DPL];
#pragma unroll
  for (int d = 0; d < DPL; ++d) {
    qv[d] = d0 + d < a.head_dim ? qy.q[h * a.head_dim + d0 + d] : 0.0f;
    acc[d] = 0.0f;
  }
  const int first = qy.lo + split * a.keys_per_split;
  const int last = a.n_split > 1 ? min(qy.pos, first + a.keys_per_split - 1) : qy.pos;
  const int e0 = kvh * a.head_dim;  // the head's first element in a row
  float m = -INFINITY, l = 0.0f;
  for (int p = first + warp; p <= last; p += kAttnWarps) {
    const int64_t row = int64_t{a.tables[qy.table + p / a.kv.block_size]} * a.kv.block_size + p % a.kv.block_size;
    const uint8_t* kp = kv_elem(a.kv.k, a.kv, row, e0);
    const uint8_t* vp = kv_elem(a.kv.v, a.kv, row, e0);
    float kv_k[DPL], kv_v[DPL];
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
      const bool in = d0 + d < a.head_dim;
      kv_k[d] = in ? kv_get(kp + (d0 + d) * a.kv.elem_bytes, a.kv.elem_bytes) : 0.0f;
      kv_v[d] = in ? kv_get(vp + (d0 + d) * a.kv.elem_bytes, a.kv.elem_bytes) : 0.0f;
    }
    float dot = 0.0f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) dot += qv[d] * kv_k[d];
    dot = warp_sum(dot);
    float sc = dot * a.scale;
    if (a.softcap > 0.0f) sc = a.softcap * tanhf(sc / a.softcap);
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), pe = expf(sc - m_new);
    l = l * corr + pe;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[d] = acc[d] * corr + pe * kv_v[d];
    m = m_new;
  }
  __shared__ float s_m[kAttnWarps], s_l[kAttnWarps];
  __shared__ float s_acc[kAttnWarps][32 * DPL];
  if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
  for (int d = 0; d < DPL; ++d) s_acc[warp][d0 + d] = acc[d];
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, s_m[w]);
  float sum = 0.0f, o[DPL] = {};
  for (int w = 0; w < kAttnWarps; ++w) {
    const float f = s_m[w] == -INFINITY ? 0.0f : expf(s_m[w] - mx);
    sum += s_l[w] * f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) o[d] += s_acc[w][d0 + d] * f;
  }
  if (a.n_split == 1) {
#pragma unroll
    for (int d = 0; d < DPL; ++d)
      if (d0 + d < a.head_dim) qy.out[h * a.head_dim + d0 + d] = o[d] / sum;
    return;
  }
  float* part = a.partial + ((int64_t{blockIdx.x} * a.n_head + h) * a.n_split + split) * (a.head_dim + 2);
  if (lane == 0) part[0] = mx, part[1] = sum;
#pragma unroll
  for (int d = 0; d < DPL; ++d)
    if (d0 + d < a.head_dim) part[2 + d0 + d] = o[d];
}

// Block (query, head): merges the n_split partial results.
__global__ void attention_combine(AttentionDev a) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const AttnQuery qy = a.queries[blockIdx.x];
  const int h = blockIdx.y;
  const float* part = a.partial + (int64_t{blockIdx.x} * a.n_head + h) * a.n_split * (a.head_dim + 2);
  float mx = -INFINITY;
  for (int s = 0; s < a.n_split; ++s)
    if (part[s * (a.head_dim + 2) + 1] > 0.0f) mx = fmaxf(mx, part[s * (a.head_dim + 2)]);
  for (int d = threadIdx.x; d < a.head_dim; d += blockDim.x) {
    float sum = 0.0f, o = 0.0f;
    for (int s = 0; s < a.n_split; ++s) {
      const float* p = part + s * (a.head_dim + 2);
      if (p[1] <= 0.0f) continue;  // a split past the query's last position
      const float f = expf(p[0] - mx);
      sum += p[1] * f;
      o += p[2 + d] * f;
    }
    qy.out[h * a.head_dim + d] = o / sum;
  }
}

// ---- expert gathers -------------------------------------------------------------

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, float* dst, int64_t n) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const float* s = src + int64_t{rows[blockIdx.x]} * n;
  float* d = dst + int64_t{blockIdx.x} * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

__global__ void scatter_rows_kernel(const float* src, const int32_t* rows, float* dst, int64_t n) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const float* s = src + int64_t{blockIdx.x} * n;
  float* d = dst + int64_t{rows[blockIdx.x]} * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

__global__ void expert_sum_kernel(const float* y, const float* w, int64_t n_used, const float* ys, const float* gate,
                                  const float* x, float* out, int64_t n) {
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  float g = 1.0f;
  if (ys && gate) {
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dot += gate[i] * x[t * n + i];
    g = 1.0f / (1.0f + expf(-block_sum(dot, red)));
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    float o = 0.0f;
    for (int64_t j = 0; j < n_used; ++j) o += w[t * n_used + j] * y[(t * n_used + j) * n + i];
    if (ys) o += g * ys[t * n + i];
    out[t * n + i] = o;
  }
}

// ---- LoRA ----------------------------------------------------------------

__device__ __forceinline__ const LoraSegDev& seg_at(const LoraSegs& s, int32_t k) {
  return s.dev != nullptr ? s.dev[k] : s.in_args[k];
}

__global__ void lora_kernel(LoraSegs segs, const float* x, float* y, int64_t n_in, int64_t n_out, float* u_out,
                            int64_t u_stride) {
  __shared__ float u[kLoraMaxRank];
  const int32_t i = static_cast<int32_t>(blockIdx.x);
  int32_t k = 0;
  while (k + 1 < segs.n && seg_at(segs, k + 1).first <= i) ++k;
  const LoraSegDev sg = seg_at(segs, k);
  const int64_t t = sg.tok0 + (i - sg.first);
  const float* xt = x + t * n_in;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int r = warp; r < sg.rank; r += n_warps) {
    const float* ar = sg.a + r * n_in;
    float d = 0.0f;
    for (int64_t j = lane; j < n_in; j += 32) d += ar[j] * xt[j];
    d = warp_sum(d);
    if (lane == 0) u[r] = d;
  }
  __syncthreads();
  if (u_out)
    for (int r = threadIdx.x; r < sg.rank; r += blockDim.x) u_out[t * u_stride + r] = u[r];
  float* yt = y + t * n_out;
  for (int64_t o = threadIdx.x; o < n_out; o += blockDim.x) {
    const float* bo = sg.b + o * sg.rank;
    float d = 0.0f;
    for (int r = 0; r < sg.rank; ++r) d += bo[r] * u[r];
    yt[o] += sg.scale * d;
  }
}

}  // namespace

void launch_lora(const LoraSegs& segs, int64_t n_tok_total, const float* x, float* y, int64_t n_in, int64_t n_out,
                 float* u_out, int64_t u_stride, cudaStream_t s) {
  if (segs.n == 0 || n_tok_total == 0) return;
  lora_kernel<<<static_cast<unsigned>(n_tok_total), kBlock, 0, s>>>(segs, x, y, n_in, n_out, u_out, u_stride);
  SLUICE_CUDA_LAUNCHED();
}

void launch_rmsnorm(const float* x, const int64_t* rows, const float* w, float eps, float* out, int64_t n_tok, int64_t n,
                    cudaStream_t s, const float* add, uint16_t* out16) {
  if (n_tok == 0) return;
  const RowShape rs = row_shape(n);
  const unsigned grid = static_cast<unsigned>(n_tok);
  const bool in_regs = with_row_regs(rs, [&](auto k) {
    rmsnorm_kernel<decltype(k)::value><<<grid, rs.threads, 0, s>>>(x, rows, add, w, eps, out, n, out16);
  });
  if (!in_regs) rmsnorm_kernel<0><<<grid, 1024, 0, s>>>(x, rows, add, w, eps, out, n, out16);
  SLUICE_CUDA_LAUNCHED();
}

void launch_glu(float* gate, const float* up, int64_t n, Activation act, cudaStream_t s, uint16_t* out16) {
  if (n == 0) return;
  glu_kernel<<<blocks_for(n), kBlock, 0, s>>>(gate, up, n, act == Activation::kGelu, out16);
  SLUICE_CUDA_LAUNCHED();
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kBlock, 0, s>>>(x, y, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_qkv_store(const QkvStoreDev& a, cudaStream_t s) {
  if (a.n_tok == 0) return;
  // Wide enough that RoPE over q and k is one or two passes (a decode token is one block).
  const int work = (a.n_head + a.n_head_kv) * (a.n_rot / 2);
  const int threads = work >= 2048 ? 1024 : work >= 512 ? 512 : kBlock;
  qkv_store_kernel<<<static_cast<unsigned>(a.n_tok), threads, 0, s>>>(a);
  SLUICE_CUDA_LAUNCHED();
}

void launch_attention(const AttentionDev& a, cudaStream_t s) {
  if (a.n_query == 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_query), static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_split));
  const int dpl = (a.head_dim + 31) / 32;
  const int threads = kAttnWarps * 32;
  if (dpl <= 1) attention_kernel<1><<<grid, threads, 0, s>>>(a);
  else if (dpl <= 2) attention_kernel<2><<<grid, threads, 0, s>>>(a);
  else if (dpl <= 4) attention_kernel<4><<<grid, threads, 0, s>>>(a);
  else attention_kernel<8><<<grid, threads, 0, s>>>(a);  // head_dim <= 256 (the backend checks)
  SLUICE_CUDA_LAUNCHED();
  if (a.n_split > 1) {
    attention_combine<<<dim3(static_cast<unsigned>(a.n_query), static_cast<unsigned>(a.n_head)), 128, 0, s>>>(a);
    SLUICE_CUDA_LAUNCHED();
  }
}

void launch_gather_rows(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t n, cudaStream_t s) {
  if (n_rows == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n_rows), kBlock, 0, s>>>(src, rows, dst, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_scatter_rows(const float* src, const int32_t* rows, float* dst, int64_t n_rows, int64_t n, cudaStream_t s) {
  if (n_rows == 0) return;
  scatter_rows_kernel<<<static_cast<unsigned>(n_rows), kBlock, 0, s>>>(src, rows, dst, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_expert_sum(const float* y, const float* w, int64_t n_used, const float* ys, const float* gate,
                       const float* x, float* out, int64_t n_tok, int64_t n, cudaStream_t s) {
  if (n_tok == 0) return;
  expert_sum_kernel<<<static_cast<unsigned>(n_tok), kBlock, 0, s>>>(y, w, n_used, ys, gate, x, out, n);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
