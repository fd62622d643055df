// CUDA matmul with fused dequantization (cuda_matmul.cuh) and cuda_api.h's
// matmul_supports / matmul_sync (the device helpers live in cuda_device.cu).
//
// Work layout. A thread block of kThreads = 128 (4 warps) owns kRows = 2 output
// rows; its 128 threads together walk the row (split-K inside the block), each
// taking 8 elements per step, so a step covers 1024 elements of both rows:
//
//   step s, thread t:   quant block  b = s * (128 / kLanes) + t / kLanes
//                       its piece    c = t % kLanes       (cuda_dequant.cuh)
//
//   row o     [blk 0 |blk 1 |blk 2 | ... ]   <- a warp reads one contiguous span:
//              c0..c3 c0..c3 c0..c3             32 x 16 B (f16), 8 blocks (q4_0),
//              t0..t3 t4..t7 t8..                 one super-block (K-quants)
//
// Why this shape. Decode is bound by HBM bandwidth, so what matters is keeping
// enough weight bytes in flight and reading each one once:
//   - every thread issues the loads of kUnroll steps for both rows before using
//     any (2 x 4 independent loads at one or two tokens), ~100+ KB in flight per SM;
//   - quant blocks of 18/34 bytes are only 2-aligned, so a lane reads its piece
//     with 2- or 4-byte loads; the lanes of a warp still cover one contiguous
//     span, so L1 merges them into full sectors (no uint4 loads there);
//   - x is read as float4 by the same lanes that decode the matching weights, so
//     lanes read consecutive x too; x (16 KB a token at n_in = 4096) is shared by
//     every block and stays in L1/L2. Two rows per thread halve those x reads,
//     which would otherwise outweigh the weights 7:1 for 4-bit types;
//   - 1024 rows give 512 blocks: every SM gets work even for the small k/v
//     projections; 128256 rows give 64128 short blocks.
// Tokens: the kernel is templated on NT = 1, 2, 4, 8 tokens per pass; a weight
// piece is decoded once and multiplied with NT rows of x. More tokens are
// covered by one launch per chunk of up to 8 (prefill speed is not the target).
// Reduction: warp shuffles, then the 4 warps' partial sums through shared memory.
#include <cstdint>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "base/check.h"

// cuda_api.h is not included: its sluice/status.h pulls in fmt, whose consteval
// format strings nvcc 13 rejects. matmul_supports and matmul_sync below carry
// its signatures (test_backend links against them).

namespace sluice::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 2;  // output rows per thread block (the output write below assumes 2)
static_assert(kRows == 2);

// Up to kMaxParts matrices of one type and width that share x (q/k/v,
// gate/up) in one launch: their rows follow each other, part p covering the
// global rows [end[p-1], end[p]) and writing its own y ([NT, its n_out]).
constexpr int kMaxParts = 4;

struct MatmulArgs {
  const uint8_t* w = nullptr;  // [n_out, row_bytes] of part 0 (a single matrix)
  int64_t row_bytes = 0;
  int n_blocks = 0;            // D blocks per row
  int64_t n_out = 0;           // rows of every part together
  const float* x = nullptr;    // [NT, x_stride]
  int64_t x_stride = 0;
  float* y = nullptr;          // [NT, y_stride] of part 0
  int64_t y_stride = 0;
  int n_parts = 1;
  const uint8_t* part_w[kMaxParts] = {};
  float* part_y[kMaxParts] = {};
  int64_t part_end[kMaxParts] = {};     // global row after the part's last
  int64_t part_stride[kMaxParts] = {};  // y row stride of the part
};

// The weights row and the output column of global row g.
__device__ __forceinline__ void locate(const MatmulArgs& a, int64_t g, const uint8_t** w, float** y, int64_t* y_stride) {
  int p = 0;
#pragma unroll
  for (int i = 0; i < kMaxParts - 1; ++i) p += (i < a.n_parts - 1 && g >= a.part_end[i]) ? 1 : 0;
  const int64_t start = p == 0 ? 0 : a.part_end[p - 1];
  *w = a.part_w[p] + (g - start) * a.row_bytes;
  *y = a.part_y[p] + (g - start);
  *y_stride = a.part_stride[p];
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Independent steps whose loads are issued together: fewer with more tokens,
// whose x values take registers.
constexpr int unroll_for(int nt) { return nt <= 2 ? 4 : (nt == 4 ? 2 : 1); }

// This thread's share of kRows weight rows times NT rows of x:
// acc[r][t] = its blocks of w[r] . xr[t] (block_sums adds the threads' shares).
// Issues the first weight loads, then waits for the kernel before (pdl_wait)
// before it reads x. A token's sums do not depend on NT: every thread adds
// its blocks in the same order whatever the unroll.
template <class D, int NT>
__device__ __forceinline__ void row_dots(const uint8_t* const (&w)[kRows], const float* const (&xr)[NT], int n_blocks,
                                         float (&acc)[kRows][NT]) {
  constexpr int kPerStep = kThreads / D::kLanes;  // D blocks a step covers
  constexpr int kUnroll = unroll_for(NT);
  const int c = static_cast<int>(threadIdx.x) % D::kLanes;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;

  typename D::Raw raw[kUnroll][kRows];
  auto load = [&](int b) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int bu = b + u * kPerStep;
      if (bu < n_blocks) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) raw[u][r] = D::load(w[r] + static_cast<int64_t>(bu) * D::kBytes, c);
      }
    }
  };
  const int b_first = static_cast<int>(threadIdx.x) / D::kLanes;
  load(b_first);  // the first weights, before the kernel this one follows is done (cuda_pdl.cuh)
  pdl_wait();
  for (int b = b_first; b < n_blocks; b += kUnroll * kPerStep) {
    if (b != b_first) load(b);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int bu = b + u * kPerStep;
      if (bu >= n_blocks) break;
      const int64_t xo = static_cast<int64_t>(bu) * D::kElems;
      float4 xv[NT][2];
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int v = 0; v < 2; ++v) xv[t][v] = __ldg(reinterpret_cast<const float4*>(xr[t] + xo + D::x_off(c, v)));
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float wv[8];
        D::decode(raw[u][r], c, wv);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          float s = acc[r][t];
          s = fmaf(wv[0], xv[t][0].x, s);
          s = fmaf(wv[1], xv[t][0].y, s);
          s = fmaf(wv[2], xv[t][0].z, s);
          s = fmaf(wv[3], xv[t][0].w, s);
          s = fmaf(wv[4], xv[t][1].x, s);
          s = fmaf(wv[5], xv[t][1].y, s);
          s = fmaf(wv[6], xv[t][1].z, s);
          s = fmaf(wv[7], xv[t][1].w, s);
          acc[r][t] = s;
        }
      }
    }
  }
}

// The block's sums of row_dots' shares: thread i < kRows * NT gets row i / NT,
// token i % NT (warp shuffles, then the warps in order through shared memory);
// the others get 0. Every thread of the block must call it.
template <int NT>
__device__ __forceinline__ float block_sums(const float (&acc)[kRows][NT]) {
  __shared__ float part[kWarps][kRows * NT];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(acc[r][t]);
      if (lane == 0) part[warp][r * NT + t] = s;
    }
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.x < kRows * NT) {
#pragma unroll
    for (int i = 0; i < kWarps; ++i) s += part[i][threadIdx.x];
  }
  __syncthreads();  // part is free again (a grouped launch's next pass writes it)
  return s;
}

template <class D, int NT>
__global__ void __launch_bounds__(kThreads) matmul_kernel(const MatmulArgs a) {
  pdl_trigger();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const uint8_t* w[kRows];
  float* yr[kRows];
  int64_t ys[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = row0 + r < a.n_out ? row0 + r : a.n_out - 1;  // tail rows: read, not written
    locate(a, row, &w[r], &yr[r], &ys[r]);
  }
  const float* xr[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) xr[t] = a.x + t * a.x_stride;
  float acc[kRows][NT];
  row_dots<D, NT>(w, xr, a.n_blocks, acc);
  const float s = block_sums<NT>(acc);
  if (threadIdx.x < kRows * NT) {
    const int r = static_cast<int>(threadIdx.x) / NT, t = static_cast<int>(threadIdx.x) % NT;
    if (row0 + r < a.n_out) {
      // r is not a compile-time index here: pick the row's output without
      // indexing the register arrays at run time.
      float* y = r == 0 ? yr[0] : yr[kRows - 1];
      const int64_t stride = r == 0 ? ys[0] : ys[kRows - 1];
      y[t * stride] = s;
    }
  }
}

// The alignment the kernels' weight loads need of a matrix's start: uint4
// loads for float types; 4-byte loads where every block start is 4-aligned, else 2.
template <class D>
constexpr uintptr_t load_align() {
  return D::kLanes == 1 ? 16 : (D::kBytes % 4 == 0 ? 4 : 2);
}

template <class D>
void launch_type(MatmulArgs a, int64_t n_tok, cudaStream_t stream) {
  CHECK(a.row_bytes % D::kBytes == 0);
  for (int p = 0; p < a.n_parts; ++p) CHECK(reinterpret_cast<uintptr_t>(a.part_w[p]) % load_align<D>() == 0);
  a.n_blocks = static_cast<int>(a.row_bytes / D::kBytes);
  const dim3 grid(static_cast<unsigned>((a.n_out + kRows - 1) / kRows));
  for (int64_t t0 = 0; t0 < n_tok;) {
    const int64_t left = n_tok - t0;
    MatmulArgs chunk = a;
    chunk.x = a.x + t0 * a.x_stride;
    for (int p = 0; p < a.n_parts; ++p) chunk.part_y[p] = a.part_y[p] + t0 * a.part_stride[p];
    if (left >= 8) {
      launch_pdl(matmul_kernel<D, 8>, grid, kThreads, stream, chunk);
      t0 += 8;
    } else if (left >= 4) {
      launch_pdl(matmul_kernel<D, 4>, grid, kThreads, stream, chunk);
      t0 += 4;
    } else if (left >= 2) {
      launch_pdl(matmul_kernel<D, 2>, grid, kThreads, stream, chunk);
      t0 += 2;
    } else {
      launch_pdl(matmul_kernel<D, 1>, grid, kThreads, stream, chunk);
      t0 += 1;
    }
    SLUICE_CUDA_LAUNCHED();
  }
}

// A grouped launch (cuda_matmul.cuh): block (x, g) owns rows kRows * x.. of
// group g's parts one after the other (part p: rows [p * n_out, (p + 1) * n_out)),
// and goes over the group's rows NT at a time; a last pass of fewer rows
// repeats the group's last one and writes only its own.
struct GroupedArgs {
  const MatmulGroup* groups = nullptr;
  const int32_t* x_rows = nullptr;
  const int32_t* y_rows = nullptr;
  int64_t row_bytes = 0;
  int n_blocks = 0;
  int n_parts = 1;
  int64_t n_out = 0;  // rows of one part
  const float* x = nullptr;
  int64_t x_stride = 0;
  float* y[2] = {};
  int64_t y_stride = 0;
};

template <class D, int NT>
__global__ void __launch_bounds__(kThreads) matmul_grouped_kernel(const GroupedArgs a) {
  pdl_trigger();
  const MatmulGroup grp = a.groups[blockIdx.y];  // written by a copy the launch follows, not by a kernel
  const int64_t rows = a.n_parts * a.n_out;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const uint8_t* w[kRows];
  float* yr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t g = row0 + r < rows ? row0 + r : rows - 1;  // tail rows: read, not written
    const int p = g >= a.n_out ? 1 : 0;
    const int64_t local = g - p * a.n_out;
    w[r] = grp.w[p] + local * a.row_bytes;
    yr[r] = a.y[p] + local;
  }
  for (int t0 = 0; t0 < grp.count; t0 += NT) {
    const float* xr[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int i = grp.off + (t0 + t < grp.count ? t0 + t : grp.count - 1);
      xr[t] = a.x + static_cast<int64_t>(a.x_rows ? __ldg(a.x_rows + i) : i) * a.x_stride;
    }
    float acc[kRows][NT];
    row_dots<D, NT>(w, xr, a.n_blocks, acc);
    const float s = block_sums<NT>(acc);
    if (threadIdx.x < kRows * NT) {
      const int r = static_cast<int>(threadIdx.x) / NT, t = static_cast<int>(threadIdx.x) % NT;
      if (row0 + r < rows && t0 + t < grp.count) {
        const int i = grp.off + t0 + t;
        const int64_t y_row = a.y_rows ? __ldg(a.y_rows + i) : i;
        (r == 0 ? yr[0] : yr[kRows - 1])[y_row * a.y_stride] = s;
      }
    }
  }
}

// Tokens a pass of a grouped launch covers: enough for the largest group, up to 8.
inline int grouped_nt(int64_t max_count) { return max_count >= 8 ? 8 : max_count >= 4 ? 4 : max_count >= 2 ? 2 : 1; }

template <class D>
void launch_grouped_type(GroupedArgs a, const GroupedRows& g, cudaStream_t stream) {
  CHECK(a.row_bytes % D::kBytes == 0);
  a.n_blocks = static_cast<int>(a.row_bytes / D::kBytes);
  const dim3 grid(static_cast<unsigned>((a.n_parts * a.n_out + kRows - 1) / kRows), static_cast<unsigned>(g.n_groups));
  switch (grouped_nt(g.max_count)) {
    case 8: launch_pdl(matmul_grouped_kernel<D, 8>, grid, kThreads, stream, a); break;
    case 4: launch_pdl(matmul_grouped_kernel<D, 4>, grid, kThreads, stream, a); break;
    case 2: launch_pdl(matmul_grouped_kernel<D, 2>, grid, kThreads, stream, a); break;
    default: launch_pdl(matmul_grouped_kernel<D, 1>, grid, kThreads, stream, a); break;
  }
  SLUICE_CUDA_LAUNCHED();
}

// Float weights whose rows the fast kernel cannot take (n_in not a multiple of
// 8, or rows not 16-byte aligned: small models such as stories260K, n_ff 172):
// a warp per output row, plain element loads, every token in turn.
template <int kType>  // 0: f32, 1: f16, 2: bf16
__global__ void __launch_bounds__(kThreads) matmul_plain_kernel(const uint8_t* w, int64_t n_in, int64_t n_out,
                                                                 const float* x, int64_t x_stride, int64_t n_tok,
                                                                 float* y, int64_t y_stride) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (row >= n_out) return;
  for (int64_t t = 0; t < n_tok; ++t) {
    float s = 0.0f;
    for (int64_t i = lane; i < n_in; i += 32) {
      float wv;
      if constexpr (kType == 0) {
        wv = reinterpret_cast<const float*>(w)[row * n_in + i];
      } else if constexpr (kType == 1) {
        wv = __half2float(reinterpret_cast<const __half*>(w)[row * n_in + i]);
      } else {
        wv = __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[row * n_in + i]) << 16);
      }
      s = fmaf(wv, x[t * x_stride + i], s);
    }
    s = warp_sum(s);
    if (lane == 0) y[t * y_stride + row] = s;
  }
}

}  // namespace

namespace {
void launch_args(DType type, const MatmulArgs& a, int64_t n_tok, cudaStream_t stream);
}  // namespace

bool matmul_supports(DType type) {
  return with_decoder(type, [&]<class D>() {});  // a decoder is what the kernels need
}

void launch_matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
                   cudaStream_t stream) {
  CHECK(matmul_supports(w.type) && w.layout == WeightLayout::kRows);
  CHECK(w.n_in >= 0 && w.n_out >= 0 && n_tok >= 0);
  CHECK(w.n_in % dtype_traits(w.type).block_size == 0 && x_stride >= w.n_in && y_stride >= w.n_out);
  if (w.n_out == 0 || n_tok == 0) return;
  const bool is_float = w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16;
  if (is_float && (w.n_in % 8 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0 ||
                   reinterpret_cast<uintptr_t>(x) % 16 != 0 || x_stride % 4 != 0)) {
    const dim3 grid(static_cast<unsigned>((w.n_out + kWarps - 1) / kWarps));
    const int kind = w.type == DType::kF32 ? 0 : (w.type == DType::kF16 ? 1 : 2);
    if (kind == 0) matmul_plain_kernel<0><<<grid, kThreads, 0, stream>>>(w.data, w.n_in, w.n_out, x, x_stride, n_tok, y, y_stride);
    else if (kind == 1) matmul_plain_kernel<1><<<grid, kThreads, 0, stream>>>(w.data, w.n_in, w.n_out, x, x_stride, n_tok, y, y_stride);
    else matmul_plain_kernel<2><<<grid, kThreads, 0, stream>>>(w.data, w.n_in, w.n_out, x, x_stride, n_tok, y, y_stride);
    SLUICE_CUDA_LAUNCHED();
    return;
  }
  CHECK(w.n_in % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0);
  MatmulArgs a{.w = w.data, .row_bytes = static_cast<int64_t>(row_bytes(w.type, w.n_in)), .n_out = w.n_out,
               .x = x, .x_stride = x_stride, .y = y, .y_stride = y_stride};
  a.part_w[0] = w.data;
  a.part_y[0] = y;
  a.part_end[0] = w.n_out;
  a.part_stride[0] = y_stride;
  launch_args(w.type, a, n_tok, stream);
}

bool matmul_groupable(std::span<const WeightView> ws) {
  if (ws.empty() || ws.size() > static_cast<size_t>(kMaxParts)) return false;
  for (const WeightView& w : ws) {
    if (w.type != ws[0].type || w.n_in != ws[0].n_in || w.layout != WeightLayout::kRows || !matmul_supports(w.type)) return false;
    const bool is_float = w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16;
    if (is_float && (w.n_in % 8 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0)) return false;
  }
  return true;
}

void launch_matmul_group(std::span<const WeightView> ws, std::span<float* const> ys, const float* x, int64_t n_tok,
                         cudaStream_t stream) {
  CHECK(matmul_groupable(ws) && ws.size() == ys.size());
  const WeightView& w0 = ws[0];
  CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && w0.n_in % 8 == 0);
  MatmulArgs a{.w = w0.data, .row_bytes = static_cast<int64_t>(row_bytes(w0.type, w0.n_in)), .x = x,
               .x_stride = w0.n_in, .y = ys[0], .y_stride = w0.n_out, .n_parts = static_cast<int>(ws.size())};
  int64_t end = 0;
  for (size_t p = 0; p < ws.size(); ++p) {
    end += ws[p].n_out;
    a.part_w[p] = ws[p].data;
    a.part_y[p] = ys[p];
    a.part_end[p] = end;
    a.part_stride[p] = ws[p].n_out;
  }
  a.n_out = end;
  if (end == 0 || n_tok == 0) return;
  launch_args(w0.type, a, n_tok, stream);
}

bool matmul_grouped_takes(const WeightView& w) {
  if (w.layout != WeightLayout::kRows) return false;
  bool ok = false;
  with_decoder(w.type, [&]<class D>() {
    ok = w.n_in % D::kElems == 0 && reinterpret_cast<uintptr_t>(w.data) % load_align<D>() == 0;
  });
  return ok;
}

void launch_matmul_grouped(DType type, int64_t n_in, int64_t n_out, const GroupedRows& g, const float* x,
                           int64_t x_stride, std::span<float* const> ys, int64_t y_stride, cudaStream_t stream) {
  CHECK(matmul_grouped_takes({.type = type, .n_in = n_in, .n_out = n_out}) && (ys.size() == 1 || ys.size() == 2));
  CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0 && x_stride >= n_in && y_stride >= n_out);
  if (g.n_groups == 0 || n_out == 0) return;
  GroupedArgs a{.groups = g.groups, .x_rows = g.x_rows, .y_rows = g.y_rows,
                .row_bytes = static_cast<int64_t>(row_bytes(type, n_in)), .n_parts = static_cast<int>(ys.size()),
                .n_out = n_out, .x = x, .x_stride = x_stride, .y_stride = y_stride};
  for (size_t p = 0; p < ys.size(); ++p) a.y[p] = ys[p];
  with_decoder(type, [&]<class D>() { launch_grouped_type<D>(a, g, stream); });
}

namespace {

void launch_args(DType type, const MatmulArgs& a, int64_t n_tok, cudaStream_t stream) {
  with_decoder(type, [&]<class D>() { launch_type<D>(a, n_tok, stream); });
}

}  // namespace

void matmul_sync(const WeightView& w, const float* x, int64_t n_tok, float* y) {
  launch_matmul(w, x, w.n_in, n_tok, y, w.n_out, nullptr);
  SLUICE_CUDA_OK(cudaStreamSynchronize(nullptr));
}

}  // namespace sluice::cuda
