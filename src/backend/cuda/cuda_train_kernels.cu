// The training operators' kernels but attention (cuda_train_kernels.cuh;
// attention in cuda_train_attention.cu).
//
// matmul_t: the matrix is decoded to f32 a panel of rows at a time with the
// forward's per-type decoders (cuda_dequant.cuh), then each thread sums one
// dx[t][i] over the panel's rows. Rows: one block per row, double sums over a
// fixed block tree. Elementwise: one thread per element, grid stride.
#include <cstdint>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_decode_rows.cuh"
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "backend/cuda/cuda_train_kernels.cuh"
#include "base/check.h"
#include "quant/dtype.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

__device__ __forceinline__ double act_value(Activation act, double g) {
  if (act == Activation::kSilu) return g * sigmoid_d(g);
  return 0.5 * g * (1.0 + tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g)));
}

__device__ __forceinline__ double act_derivative(Activation act, double g) {
  if (act == Activation::kSilu) {
    const double s = sigmoid_d(g);
    return s * (1.0 + g * (1.0 - s));
  }
  const double th = tanh(kSqrt2OverPi * (g + 0.044715 * g * g * g));
  return 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * g * g);
}

// ---- matmul_t ----

__global__ void matmul_t_panel(const float* wp, int64_t n_rows, int64_t row0, const float* dy, int64_t n_out,
                               float* dx, int64_t n_in, int64_t n_items, bool first) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n_items; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / n_in, i = k % n_in;
    const float* g = dy + t * n_out + row0;
    double acc = 0;
    for (int64_t r = 0; r < n_rows; ++r) acc += static_cast<double>(g[r]) * wp[r * n_in + i];
    dx[k] = static_cast<float>((first ? 0.0 : static_cast<double>(dx[k])) + acc);
  }
}

// ---- rows and elements ----

__global__ void rmsnorm_backward(const float* x, const float* w, const float* dy, float* dx, int64_t n, float eps) {
  __shared__ double red[32];
  const int64_t t = blockIdx.x;
  x += t * n, dy += t * n, dx += t * n;
  double ss = 0, gx = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    ss += static_cast<double>(x[i]) * x[i];
    gx += static_cast<double>(dy[i]) * w[i] * x[i];
  }
  ss = block_sum(ss, red);
  gx = block_sum(gx, red);
  const double r = 1.0 / sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
  const double c = r * r * r * gx / static_cast<double>(n);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    dx[i] = static_cast<float>(dx[i] + (r * static_cast<double>(dy[i]) * w[i] - c * x[i]));
}

__global__ void train_rope(float* x, const float* cos_sin, int64_t n_items, int64_t n_head, int64_t head_dim,
                           int64_t half, bool adjacent, bool inverse) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n_items; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = k % half, th = k / half, t = th / n_head;  // th = t * n_head + h
    const float* cs = cos_sin + t * half * 2;
    const float c = cs[2 * i];
    const float sn = inverse ? -cs[2 * i + 1] : cs[2 * i + 1];
    float* row = x + th * head_dim;
    const int64_t i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + half;
    const float x0 = row[i0], x1 = row[i1];
    row[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    row[i1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
  }
}

__global__ void add_rows(float* x, const float* v, int64_t n_items, int64_t n) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n_items; k += int64_t{gridDim.x} * blockDim.x)
    x[k] += v[k % n];
}

__global__ void train_glu(const float* g, const float* u, float* h, int64_t n, Activation act) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    h[i] = static_cast<float>(act_value(act, g[i]) * u[i]);
}

__global__ void glu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                             Activation act) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double gi = g[i], d = dh[i];
    dg[i] = static_cast<float>(d * static_cast<double>(u[i]) * act_derivative(act, gi));
    du[i] = static_cast<float>(d * act_value(act, gi));
  }
}

__global__ void cross_entropy(float* logits, const int32_t* targets, double* loss, int64_t n_vocab, float grad_scale) {
  __shared__ double red[32];
  const int64_t t = blockIdx.x;
  float* z = logits + t * n_vocab;
  const int32_t target = targets[t];
  if (target < 0 || target >= n_vocab) {  // the host checked target < n_vocab
    for (int64_t i = threadIdx.x; i < n_vocab; i += kThreads) z[i] = 0.0f;
    if (threadIdx.x == 0) loss[t] = 0;
    return;
  }
  double m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n_vocab; i += kThreads) m = fmax(m, static_cast<double>(z[i]));
  m = block_max(m, red);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n_vocab; i += kThreads) sum += exp(static_cast<double>(z[i]) - m);
  sum = block_sum(sum, red);
  const double lse = m + log(sum);
  const double zt = z[target];  // read by every thread before any writes (block_sum synchronized)
  __syncthreads();
  if (threadIdx.x == 0) loss[t] = lse - zt;
  for (int64_t i = threadIdx.x; i < n_vocab; i += kThreads) {
    const double p = exp(static_cast<double>(z[i]) - lse) - (i == target ? 1.0 : 0.0);
    z[i] = static_cast<float>(p * grad_scale);
  }
}

__global__ void adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double b1, double b2,
                      double eps, double wd, double bc1, double bc2) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double gi = g[i];
    const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * gi;
    const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * gi * gi;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    double pi = p[i];
    pi -= lr * wd * pi;
    pi -= lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
    p[i] = static_cast<float>(pi);
  }
}

// ---- the routed FFN's rows ----

__global__ void slot_sum(const float* y, const int32_t* row, const float* w, float* out, int64_t n_items, int64_t k,
                         int64_t n) {
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < n_items; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / n, i = e % n;
    float o = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = y[int64_t{row[t * k + j]} * n + i];
      o = __fadd_rn(o, w ? __fmul_rn(w[t * k + j], v) : v);
    }
    out[e] = o;
  }
}

__global__ void slot_dw(const float* y, const int32_t* row, const float* dout, float* dw, int64_t n_slots, int64_t k,
                        int64_t n) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= n_slots) return;  // whole warps leave together
  const float* yr = y + int64_t{row[warp]} * n;
  const float* d = dout + (warp / k) * n;
  double acc = 0;
  for (int64_t i = lane; i < n; i += 32) acc += static_cast<double>(d[i]) * yr[i];
  acc = warp_sum(acc);
  if (lane == 0) dw[warp] = static_cast<float>(acc);
}

__global__ void slot_dy(const int32_t* row, const float* w, const float* dout, float* dy, int64_t n_items, int64_t k,
                        int64_t n) {
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < n_items; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t slot = e / n, i = e % n;  // slot = t * k + j
    dy[int64_t{row[slot]} * n + i] = __fmul_rn(w[slot], dout[(slot / k) * n + i]);
  }
}

__global__ void gated_add(const float* x, const float* gate, const float* y, float* out, float* s_out, int64_t n) {
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  float g = 1.0f;
  if (gate) {
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dot += gate[i] * x[t * n + i];
    g = 1.0f / (1.0f + expf(-block_sum(dot, red)));
  }
  if (threadIdx.x == 0) s_out[t] = g;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[t * n + i] = __fadd_rn(out[t * n + i], __fmul_rn(g, y[t * n + i]));
}

__global__ void gated_add_backward(const float* gate, const float* y, const float* s_in, const float* dout, float* dy,
                                   float* dx, int64_t n) {
  __shared__ double red[32];
  const int64_t t = blockIdx.x;
  const float s = s_in[t];
  const float* d = dout + t * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dy[t * n + i] = __fmul_rn(s, d[i]);
  if (!gate) return;  // the same for the whole block
  double dot = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dot += static_cast<double>(d[i]) * y[t * n + i];
  dot = block_sum(dot, red);
  const auto dz = static_cast<float>(dot * s * (1.0f - s));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dx[t * n + i] = __fadd_rn(dx[t * n + i], __fmul_rn(dz, gate[i]));
}

// ---- lora_backward ----

__global__ void lora_du(const float* b, const float* dy, double* du, int64_t n_tok, int64_t n_out, int64_t rank,
                        float scale) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (warp >= n_tok * rank) return;  // whole warps leave together
  const int64_t t = warp / rank, r = warp % rank;
  double s = 0;
  for (int64_t o = lane; o < n_out; o += 32) s += static_cast<double>(b[o * rank + r]) * dy[t * n_out + o];
  s = warp_sum(s);
  if (lane == 0) du[t * rank + r] = static_cast<double>(scale) * s;
}

__global__ void lora_db(const float* dy, const float* u, float* db, int64_t n_tok, int64_t n_out, int64_t rank,
                        float scale) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n_out * rank;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = k / rank, r = k % rank;
    double s = 0;
    for (int64_t t = 0; t < n_tok; ++t) s += static_cast<double>(scale) * dy[t * n_out + o] * u[t * rank + r];
    db[k] = static_cast<float>(db[k] + s);
  }
}

// dA and dx are both du [n_tok, rank] times an f32 matrix f [n_sum, n_cols]:
//   c[row][col] += sum_j du[row * du_row + j * du_j] f[j][col]   (one thread per (row, col), j ascending)
// dA = du^T x: rows r, j over t (du_row = 1, du_j = rank); dx = du A: rows t,
// j over r (du_row = rank, du_j = 1).
// out[i] = the 16-bit float src[i] (F16, or BF16 when kBF16) as a float; any
// width and any 2-byte alignment, for the rows decode_rows' 8-wide loads cannot read.
template <bool kBF16>
__global__ void rows16_to_f32(const uint16_t* src, int64_t n, float* out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = __ldg(src + i);
    out[i] = kBF16 ? __uint_as_float(bits << 16) : __half2float(__ushort_as_half(static_cast<uint16_t>(bits)));
  }
}

__global__ void add_du_times(const double* du, int64_t du_row, int64_t du_j, const float* f, float* c,
                             int64_t n_rows, int64_t n_cols, int64_t n_sum) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n_rows * n_cols;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = k / n_cols, col = k % n_cols;
    double s = 0;
    for (int64_t j = 0; j < n_sum; ++j) s += du[row * du_row + j * du_j] * f[j * n_cols + col];
    c[k] = static_cast<float>(c[k] + s);
  }
}

void launch_add_du_times(const double* du, int64_t du_row, int64_t du_j, const float* f, float* c, int64_t n_rows,
                         int64_t n_cols, int64_t n_sum, cudaStream_t s) {
  if (n_rows * n_cols == 0) return;
  add_du_times<<<grid_for(n_rows * n_cols), kThreads, 0, s>>>(du, du_row, du_j, f, c, n_rows, n_cols, n_sum);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace

bool weights_to_f32_type(DType type, WeightLayout layout) { return decodes_rows(type, layout); }

namespace {
// F16 / BF16 rows decode_rows cannot take (a width not a multiple of 8, or
// rows not 16-byte aligned): one element a thread.
bool rows16_any_width(const WeightView& w) {
  return (w.type == DType::kF16 || w.type == DType::kBF16) && w.layout == WeightLayout::kRows && w.n_in > 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 2 == 0;
}
}  // namespace

bool weights_to_f32_takes(const WeightView& w) { return decodes_rows(w) || rows16_any_width(w); }

void launch_weights_to_f32(const WeightView& w, int64_t row0, int64_t n_rows, float* out, cudaStream_t s) {
  if (decodes_rows(w)) {
    launch_decode_rows(w, row0, n_rows, out, s);
    return;
  }
  CHECK(rows16_any_width(w) && row0 >= 0 && row0 + n_rows <= w.n_out);
  const int64_t n = n_rows * w.n_in;
  if (n == 0) return;
  const auto* src = reinterpret_cast<const uint16_t*>(w.data) + row0 * w.n_in;
  if (w.type == DType::kBF16) rows16_to_f32<true><<<grid_for(n), kThreads, 0, s>>>(src, n, out);
  else rows16_to_f32<false><<<grid_for(n), kThreads, 0, s>>>(src, n, out);
  SLUICE_CUDA_LAUNCHED();
}

void launch_matmul_t_panel(const float* wp, int64_t n_rows, int64_t row0, const float* dy, int64_t n_out, float* dx,
                           int64_t n_in, int64_t n_tok, bool first, cudaStream_t s) {
  const int64_t items = n_tok * n_in;
  if (items == 0) return;
  matmul_t_panel<<<grid_for(items), kThreads, 0, s>>>(wp, n_rows, row0, dy, n_out, dx, n_in, items, first);
  SLUICE_CUDA_LAUNCHED();
}

void launch_rmsnorm_backward(const float* x, const float* w, const float* dy, float* dx, int64_t n_tok, int64_t n,
                             float eps, cudaStream_t s) {
  if (n_tok == 0) return;
  rmsnorm_backward<<<static_cast<unsigned>(n_tok), kThreads, 0, s>>>(x, w, dy, dx, n, eps);
  SLUICE_CUDA_LAUNCHED();
}

void launch_train_rope(float* x, const float* cos_sin, int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot,
                       RopeLayout layout, bool inverse, cudaStream_t s) {
  const int64_t half = n_rot / 2, items = n_tok * n_head * half;
  if (items == 0) return;
  train_rope<<<grid_for(items), kThreads, 0, s>>>(x, cos_sin, items, n_head, head_dim, half,
                                                  layout == RopeLayout::kAdjacent, inverse);
  SLUICE_CUDA_LAUNCHED();
}

void launch_add_rows(float* x, const float* v, int64_t n_tok, int64_t n, cudaStream_t s) {
  const int64_t items = n_tok * n;
  if (items == 0) return;
  add_rows<<<grid_for(items), kThreads, 0, s>>>(x, v, items, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_train_glu(const float* g, const float* u, float* h, int64_t n, Activation act, cudaStream_t s) {
  if (n == 0) return;
  train_glu<<<grid_for(n), kThreads, 0, s>>>(g, u, h, n, act);
  SLUICE_CUDA_LAUNCHED();
}

void launch_glu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                         Activation act, cudaStream_t s) {
  if (n == 0) return;
  glu_backward<<<grid_for(n), kThreads, 0, s>>>(g, u, dh, dg, du, n, act);
  SLUICE_CUDA_LAUNCHED();
}

void launch_cross_entropy(float* logits, const int32_t* targets, double* loss, int64_t n_tok, int64_t n_vocab,
                          float grad_scale, cudaStream_t s) {
  if (n_tok == 0) return;
  cross_entropy<<<static_cast<unsigned>(n_tok), kThreads, 0, s>>>(logits, targets, loss, n_vocab, grad_scale);
  SLUICE_CUDA_LAUNCHED();
}

void launch_adamw(float* p, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, double bc1, double bc2, cudaStream_t s) {
  if (n == 0) return;
  adamw<<<grid_for(n), kThreads, 0, s>>>(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
  SLUICE_CUDA_LAUNCHED();
}

void launch_lora_du(const float* b, const float* dy, double* du, int64_t n_tok, int64_t n_out, int64_t rank,
                    float scale, cudaStream_t s) {
  const int64_t threads = n_tok * rank * 32;
  if (threads == 0) return;
  lora_du<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, s>>>(b, dy, du, n_tok, n_out,
                                                                                         rank, scale);
  SLUICE_CUDA_LAUNCHED();
}

void launch_lora_db(const float* dy, const float* u, float* db, int64_t n_tok, int64_t n_out, int64_t rank, float scale,
                    cudaStream_t s) {
  if (n_out * rank == 0) return;
  lora_db<<<grid_for(n_out * rank), kThreads, 0, s>>>(dy, u, db, n_tok, n_out, rank, scale);
  SLUICE_CUDA_LAUNCHED();
}

void launch_lora_da(const double* du, const float* x, float* da, int64_t n_tok, int64_t n_in, int64_t rank,
                    cudaStream_t s) {
  launch_add_du_times(du, 1, rank, x, da, rank, n_in, n_tok, s);
}

void launch_lora_dx(const double* du, const float* a, float* dx, int64_t n_tok, int64_t n_in, int64_t rank,
                    cudaStream_t s) {
  launch_add_du_times(du, rank, 1, a, dx, n_tok, n_in, rank, s);
}

void launch_slot_sum(const float* y, const int32_t* row, const float* w, float* out, int64_t n_tok, int64_t k, int64_t n,
                     cudaStream_t s) {
  const int64_t items = n_tok * n;
  if (items == 0) return;
  slot_sum<<<grid_for(items), kThreads, 0, s>>>(y, row, w, out, items, k, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_slot_sum_backward(const float* y, const int32_t* row, const float* w, const float* dout, float* dy,
                              float* dw, int64_t n_tok, int64_t k, int64_t n, cudaStream_t s) {
  const int64_t slots = n_tok * k;
  if (slots == 0 || n == 0) return;
  slot_dw<<<static_cast<unsigned>((slots * 32 + kThreads - 1) / kThreads), kThreads, 0, s>>>(y, row, dout, dw, slots,
                                                                                            k, n);
  SLUICE_CUDA_LAUNCHED();
  slot_dy<<<grid_for(slots * n), kThreads, 0, s>>>(row, w, dout, dy, slots * n, k, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_gated_add(const float* x, const float* gate, const float* y, float* out, float* s_out, int64_t n_tok,
                      int64_t n, cudaStream_t s) {
  if (n_tok == 0) return;
  gated_add<<<static_cast<unsigned>(n_tok), kThreads, 0, s>>>(x, gate, y, out, s_out, n);
  SLUICE_CUDA_LAUNCHED();
}

void launch_gated_add_backward(const float* gate, const float* y, const float* s_in, const float* dout, float* dy,
                               float* dx, int64_t n_tok, int64_t n, cudaStream_t s) {
  if (n_tok == 0) return;
  gated_add_backward<<<static_cast<unsigned>(n_tok), kThreads, 0, s>>>(gate, y, s_in, dout, dy, dx, n);
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
