#include "backend/cuda/cuda_matmul_q8.cuh"

#include <cstdlib>
#include <cstring>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_dp4a_formats_more.cuh"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_q8_blocks.cuh"
#include "backend/cuda/cuda_quantize.cuh"
#include "backend/cuda/cuda_rows.cuh"
#include "base/check.h"
#include "quant/blocks.h"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 4;  // per thread block; a warp owns R output rows

// A warp per block of 32: lane i quantizes element i.
__global__ void quantize_x_kernel(const float* x, int64_t x_stride, int64_t n_blocks, QuantizedX qx) {
  pdl_trigger();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t t = blockIdx.y;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (b >= n_blocks) return;
  quantize_lane(x[t * x_stride + b * 32 + lane], t, b, lane, qx);
}

// A block per token: the row into registers (x += add first, when set), its
// sum of squares, then each warp writes xn and the quantization of its 32-blocks
// (cuda_rows.cuh's register order). Same arithmetic as launch_rmsnorm.
template <int K>
__global__ void rmsnorm_quantize_kernel(float* x, const float* add, const float* w, float eps, float* xn, int64_t n,
                                        QuantizedX qx) {
  pdl_trigger();
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  float* xt = x + t * n;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float v[K], wv[K];
  const float ss = load_row<K>(xt, add ? add + t * n : nullptr, xt, w, n, v, wv, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = row_elem(k);
    if (i >= n) break;  // the same for the whole warp: n % 32 == 0
    const float y = v[k] * inv * wv[k];
    xn[t * n + i] = y;
    quantize_lane(y, t, i / 32, lane, qx);
  }
}

__global__ void glu_quantize_kernel(float* gate, const float* up, int64_t n, int gelu, QuantizedX qx) {
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (b >= n / 32) return;
  const int64_t i = t * n + b * 32 + lane;
  const float g = gate[i];
  float a;
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    a = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  } else {
    a = g / (1.0f + expf(-g));
  }
  const float h = a * up[i];
  gate[i] = h;
  quantize_lane(h, t, b, lane, qx);
}

// This lane's share of R weight rows times NT tokens' quantized x (rows
// x_row[t] of qx): the first weight loads, pdl_wait, then the units in
// order (the same order whatever NT, so a token's sums do not depend on it).
template <class F, int R, int NT, int kUnrollAsked>
__device__ __forceinline__ void q8_row_dots(const RowAt (&wr)[R], const int64_t (&x_row)[NT], const QuantizedX& qx,
                                            int n_units, float (&acc)[R][NT]) {
  constexpr int kUnroll = kUnrollAsked < F::kMaxUnroll ? kUnrollAsked : F::kMaxUnroll;
  const int lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  typename F::Raw raw[kUnroll][R];
  auto load = [&](int u0) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = u0 + 32 * k;
      if (u < n_units)
#pragma unroll
        for (int r = 0; r < R; ++r) raw[k][r] = F::load(wr[r], u);
    }
  };
  load(lane);  // the first weights, before the kernel this one follows is done (cuda_pdl.cuh)
  pdl_wait();
  for (int u0 = lane; u0 < n_units; u0 += 32 * kUnroll) {
    if (u0 != lane) load(u0);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int u = u0 + 32 * k;
      if (u >= n_units) break;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const typename F::X x = F::load_x(x_row_of(qx, x_row[t]), u);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r][t] += F::dot(raw[k][r], x, u);
      }
    }
  }
}

// Warp w of a thread block owns rows row0 .. row0 + R - 1; lane l takes the
// format's units l, l + 32, ... of those rows (cuda_dp4a_formats.cuh), kUnroll
// of them loaded before use (at most the format's kMaxUnroll). kUnroll: units
// a lane loads before using them (fewer with more tokens, whose x takes
// registers). 8 for one token and one row was slower on an
// H200 (the down projection 17.7 against 15.0 us): its registers cost a
// third of the warps, so the rows took two waves.
template <class F, int R, int NT, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    matmul_q8_kernel(Parts parts, int64_t n_in, int64_t n_out, QuantizedX qx) {
  pdl_trigger();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * R;
  if (row0 >= n_out) return;
  RowAt wr[R];
  float* yr[R];
  int64_t ys[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t g = row0 + r < n_out ? row0 + r : n_out - 1;
    const int p = part_of(parts, g);
    const int64_t start = p == 0 ? 0 : parts.end[p - 1];
    wr[r] = F::row(parts.w[p], g - start, parts.end[p] - start, n_in);
    yr[r] = parts.y[p] + (g - start);
    ys[r] = parts.stride[p];
  }
  int64_t x_row[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) x_row[t] = t;
  float acc[R][NT];
  q8_row_dots<F, R, NT, kUnroll>(wr, x_row, qx, static_cast<int>(n_in / F::kElems), acc);
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < n_out) yr[r][t * ys[r]] = v;
    }
}

template <class F, int R>
void launch_rows(const Parts& parts, int64_t n_in, int64_t n_out, QuantizedX qx, int64_t n_tok, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((n_out + kWarps * R - 1) / (kWarps * R)));
  for (int64_t t0 = 0; t0 < n_tok;) {
    const QuantizedX c = from_token(qx, t0);
    const Parts pc = from_token(parts, t0);
    const int64_t left = n_tok - t0;
    const int nt = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    switch (nt) {
      case 8: launch_pdl(matmul_q8_kernel<F, R, 8, 2>, grid, kWarps * 32, s, pc, n_in, n_out, c); break;
      case 4: launch_pdl(matmul_q8_kernel<F, R, 4, 2>, grid, kWarps * 32, s, pc, n_in, n_out, c); break;
      case 2: launch_pdl(matmul_q8_kernel<F, R, 2, 4>, grid, kWarps * 32, s, pc, n_in, n_out, c); break;
      default: launch_pdl(matmul_q8_kernel<F, R, 1, 4>, grid, kWarps * 32, s, pc, n_in, n_out, c); break;
    }
    SLUICE_CUDA_LAUNCHED();
    t0 += nt;
  }
}

// A grouped launch (cuda_matmul.cuh's MatmulGroup): warps as above over
// group blockIdx.y's parts (part p: rows [p * n_out, (p + 1) * n_out)), NT of
// the group's rows a pass; a last pass of fewer repeats the group's last row
// and writes only its own.
struct GroupedQ8 {
  const MatmulGroup* groups = nullptr;
  const int32_t* x_rows = nullptr;  // rows of qx
  const int32_t* y_rows = nullptr;
  int n_parts = 1;
  int64_t n_out = 0;  // rows of one part
  float* y[2] = {};
  int64_t y_stride = 0;
};

template <class F, int R, int NT, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) matmul_q8_grouped_kernel(GroupedQ8 a, int64_t n_in, QuantizedX qx) {
  pdl_trigger();
  const MatmulGroup grp = a.groups[blockIdx.y];  // written by a copy the launch follows, not by a kernel
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = a.n_parts * a.n_out;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * R;
  if (row0 >= rows) return;
  RowAt wr[R];
  float* yr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t g = row0 + r < rows ? row0 + r : rows - 1;
    const int p = g >= a.n_out ? 1 : 0;
    wr[r] = F::row(grp.w[p], g - p * a.n_out, a.n_out, n_in);
    yr[r] = a.y[p] + (g - p * a.n_out);
  }
  for (int t0 = 0; t0 < grp.count; t0 += NT) {
    int64_t x_row[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int i = grp.off + (t0 + t < grp.count ? t0 + t : grp.count - 1);
      x_row[t] = a.x_rows ? __ldg(a.x_rows + i) : i;
    }
    float acc[R][NT];
    q8_row_dots<F, R, NT, kUnroll>(wr, x_row, qx, static_cast<int>(n_in / F::kElems), acc);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(acc[r][t]);
        if (lane == 0 && row0 + r < rows && t0 + t < grp.count) {
          const int i = grp.off + t0 + t;
          yr[r][(a.y_rows ? __ldg(a.y_rows + i) : i) * a.y_stride] = v;
        }
      }
  }
}

template <class F>
void launch_grouped(const GroupedQ8& a, int64_t n_in, const GroupedRows& g, QuantizedX qx, cudaStream_t s) {
  const int64_t rows = a.n_parts * a.n_out;
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>(g.n_groups));
  const int64_t m = g.max_count;
  if (m >= 8) launch_pdl(matmul_q8_grouped_kernel<F, 1, 8, 2>, grid, kWarps * 32, s, a, n_in, qx);
  else if (m >= 4) launch_pdl(matmul_q8_grouped_kernel<F, 1, 4, 2>, grid, kWarps * 32, s, a, n_in, qx);
  else if (m >= 2) launch_pdl(matmul_q8_grouped_kernel<F, 1, 2, 4>, grid, kWarps * 32, s, a, n_in, qx);
  else launch_pdl(matmul_q8_grouped_kernel<F, 1, 1, 4>, grid, kWarps * 32, s, a, n_in, qx);
  SLUICE_CUDA_LAUNCHED();
}

template <class F>
void launch_type(const Parts& parts, int64_t n_in, int64_t n_out, QuantizedX qx, int64_t n_tok, cudaStream_t s) {
  // Two rows a warp halve the x reads where rows are many; one where few
  // rows must still spread over every SM.
  if (n_out >= 8192) launch_rows<F, 2>(parts, n_in, n_out, qx, n_tok, s);
  else launch_rows<F, 1>(parts, n_in, n_out, qx, n_tok, s);
}

}  // namespace

bool matmul_q8_takes(const WeightView& w) {
  static const bool all_types = [] {  // SLUICE_CUDA_DP4A_ALL=0: Q4_0 / Q8_0 only, the rest on float x (an A/B)
    const char* e = std::getenv("SLUICE_CUDA_DP4A_ALL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  const bool legacy = w.type == DType::kQ4_0 || w.type == DType::kQ8_0;
  if (w.layout == WeightLayout::kSplitScales) {  // 16-byte loads of the quants
    return legacy && w.n_in % 32 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  }
  if (w.layout != WeightLayout::kRows || (!all_types && !legacy)) return false;
  // Each format's block and the alignment its loads need (cuda_dp4a_formats*.cuh, cuda_mmq_formats.cuh).
  int64_t block = 256, align = 4;
  switch (w.type) {
    case DType::kQ4_K:
    case DType::kQ5_K: align = 16; break;  // 16-byte loads; the rows then aligned too (144 = 9 x 16, 176 = 11 x 16)
    case DType::kIQ4_XS: align = 8; break;  // 8-byte loads (136 = 17 x 8)
    case DType::kQ2_K: break;               // 4-byte loads (84)
    case DType::kQ6_K:
    case DType::kQ3_K: break;  // aligned words around 2-aligned spans, none before the matrix
    case DType::kQ5_1: block = 32, align = 8; break;  // 24
    case DType::kQ4_1: block = 32; break;             // 20
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL: block = 32, align = 2; break;  // 2-byte loads (18, 34, 22, 18)
    default: return false;
  }
  return w.n_in % block == 0 && reinterpret_cast<uintptr_t>(w.data) % align == 0;
}

void quantize_x(const float* x, int64_t x_stride, int64_t n_in, int64_t n_tok, const QuantizedX& qx, cudaStream_t s) {
  CHECK(n_in % 32 == 0 && qx.n_in >= n_in);
  if (n_tok == 0 || n_in == 0) return;
  const int64_t n_blocks = n_in / 32;
  const dim3 grid(static_cast<unsigned>((n_blocks + 7) / 8), static_cast<unsigned>(n_tok));
  quantize_x_kernel<<<grid, 256, 0, s>>>(x, x_stride, n_blocks, qx);
  SLUICE_CUDA_LAUNCHED();
}

void rmsnorm_quantize_x(float* x, const float* add, const float* w, float eps, float* xn, int64_t n_tok, int64_t n,
                        const QuantizedX& qx, cudaStream_t s) {
  CHECK(n % 32 == 0 && qx.n_in == n);
  if (n_tok == 0) return;
  const RowShape rs = row_shape(n);
  const unsigned grid = static_cast<unsigned>(n_tok);
  const bool in_regs = with_row_regs(rs, [&](auto k) {
    rmsnorm_quantize_kernel<decltype(k)::value><<<grid, rs.threads, 0, s>>>(x, add, w, eps, xn, n, qx);
  });
  if (!in_regs) {  // n > 16384: two launches
    launch_rmsnorm(x, nullptr, w, eps, xn, n_tok, n, s, add);
    quantize_x(xn, n, n, n_tok, qx, s);
    return;
  }
  SLUICE_CUDA_LAUNCHED();
}

void glu_quantize_x(float* gate, const float* up, int64_t n_tok, int64_t n, Activation act, const QuantizedX& qx,
                    cudaStream_t s) {
  CHECK(n % 32 == 0 && qx.n_in == n);
  if (n_tok == 0) return;
  const dim3 grid(static_cast<unsigned>((n / 32 + 7) / 8), static_cast<unsigned>(n_tok));
  glu_quantize_kernel<<<grid, 256, 0, s>>>(gate, up, n, act == Activation::kGelu, qx);
  SLUICE_CUDA_LAUNCHED();
}

void launch_matmul_q8_grouped(DType type, WeightLayout layout, int64_t n_in, int64_t n_out, const GroupedRows& g,
                              const QuantizedX& qx, std::span<float* const> ys, int64_t y_stride, cudaStream_t s) {
  CHECK(matmul_q8_takes({.type = type, .n_in = n_in, .n_out = n_out, .layout = layout}) && qx.n_in >= n_in);
  CHECK((ys.size() == 1 || ys.size() == 2) && y_stride >= n_out);
  if (g.n_groups == 0 || n_out == 0) return;
  GroupedQ8 a{.groups = g.groups, .x_rows = g.x_rows, .y_rows = g.y_rows, .n_parts = static_cast<int>(ys.size()),
              .n_out = n_out, .y_stride = y_stride};
  for (size_t p = 0; p < ys.size(); ++p) a.y[p] = ys[p];
  with_dp4a_format(type, layout, [&]<class F>() { launch_grouped<F>(a, n_in, g, qx, s); });
}

void launch_matmul_q8(std::span<const WeightView> ws, std::span<float* const> ys, const QuantizedX& qx, int64_t n_tok,
                      cudaStream_t s) {
  with_q8_parts(ws, ys, qx, n_tok, [&](const Parts& parts, int64_t n_in, int64_t n_out) {
    with_dp4a_format(ws[0].type, ws[0].layout, [&]<class F>() { launch_type<F>(parts, n_in, n_out, qx, n_tok, s); });
  });
}

}  // namespace sluice::cuda
