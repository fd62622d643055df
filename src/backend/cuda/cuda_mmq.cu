// Matmuls of 9 to 32 tokens on the int8 tensor cores, every type the dp4a
// kernels take (cuda_matmul_q8.cuh: launch_matmul_mmq), for batched decode:
// the dp4a kernels take at most 8 tokens a pass and read the weights once per
// pass, and past 8 tokens their x reads (every lane reads its token rows for
// every block it decodes) outgrow the weights; here a warp's mma takes 16
// rows x 32 weights against 8 tokens' x at once, so one pass over the weights
// serves up to 32 tokens.
//
// Work layout. A thread block owns 16 output rows; its kWarps warps split the
// row's blocks of 32 weights between them (warp w: blocks w, w + kWarps, ...,
// the format's kUnroll of them loaded before use), then add their partial
// sums in warp order through shared memory. Per block of 32 weights and
// 8-token tile j, a warp's mma.m16n8k32 gives the int32 dot products of its
// 16 rows with the tile's quantized x; each is scaled at once, as the dp4a
// kernel scales a block's dot product, by the coefficients the format gives
// (cuda_mmq_formats.cuh):
//   Q8_0: d_w * d_x * sum(q_w q_x)          Q4_0: d_w * d_x * sum(q_w q_x) - 8 d_w s_x
// (Q4_0's quants go in as their unsigned nibbles 0..15, the -8 through s_x);
// the types with sub-blocks of 16 take an mma per half.
//
// Fragments (lane = 4 g + t): A[g][4t..4t+3] and A[g][16+4t..] are row
// row0 + g's quants 4t..4t+3 and 16+4t.., so one 4-byte word of a Q4_0 block
// (qs[4t..4t+3]) gives both: its low nibbles and its high ones; B's columns
// are tokens, B[4t..][g] token j * 8 + g's x bytes 4t..4t+3 of the block.
//
// A token's result depends on that token alone (x rows past n_tok repeat the
// last one and are not written), not bit for bit the dp4a kernel's: the sums
// go in another order.
#include <algorithm>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_mmq_formats.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_q8_blocks.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 8;   // split-K warps of a block
constexpr int kMaxTiles = 4;  // 8-token tiles a pass (32 tokens)

__device__ __forceinline__ void mma_s8(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef SLUICE_CUDA_EMU  // the CPU emulator (tests/cuda_emu) computes the tile over the warp's fragments
  ::sluice_emu::mma_m16n8k32_s8_s32(c, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <class M, int J>
__global__ void __launch_bounds__(kWarps * 32, J <= 2 ? 2 : 1)
    mmq_kernel(const Parts parts, int n_blocks, int64_t n_out, const QuantizedX qx, int n_tok) {
  pdl_trigger();
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t n_in = static_cast<int64_t>(n_blocks) * 32;
  RowAt wr[2];
  float* yr[2];
  int64_t ys[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + g + 8 * h < n_out ? row0 + g + 8 * h : n_out - 1;  // tail rows: read, not written
    const int p = part_of(parts, row);
    const int64_t start = p == 0 ? 0 : parts.end[p - 1];
    wr[h] = M::row(parts.w[p], row - start, parts.end[p] - start, n_in);
    yr[h] = parts.y[p] + (row - start);
    ys[h] = parts.stride[p];
  }
  // Token rows of x: this lane's B column (j * 8 + g) and its two C columns (j * 8 + 2t, + 1).
  const int nb_x = static_cast<int>(qx.n_in / 32);
  int b_row[J], c_row[J][2];
#pragma unroll
  for (int j = 0; j < J; ++j) {
    b_row[j] = min(j * 8 + g, n_tok - 1);
    c_row[j][0] = min(j * 8 + 2 * t, n_tok - 1);
    c_row[j][1] = min(j * 8 + 2 * t + 1, n_tok - 1);
  }
  float acc[J][4];
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;

  constexpr int kUnroll = M::kUnroll;  // blocks a warp loads before using them
  typename M::Raw w[kUnroll][2];
  auto load = [&](int b0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + u * kWarps;
      if (b < n_blocks)
#pragma unroll
        for (int h = 0; h < 2; ++h) w[u][h] = M::load(wr[h], b, t);
    }
  };
  load(warp);  // the first weights, before the kernel this one follows is done (cuda_pdl.cuh)
  pdl_wait();
  for (int b0 = warp; b0 < n_blocks; b0 += kWarps * kUnroll) {
    if (b0 != warp) load(b0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + u * kWarps;
      if (b >= n_blocks) break;
      const MmqFrag f[2] = {M::frag(w[u][0], b, t), M::frag(w[u][1], b, t)};
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int8_t* xq = qx.q + static_cast<int64_t>(b_row[j]) * qx.n_in + static_cast<int64_t>(b) * 32;
        const auto b_lo = static_cast<uint32_t>(__ldg(reinterpret_cast<const int*>(xq + 4 * t)));
        const auto b_hi = static_cast<uint32_t>(__ldg(reinterpret_cast<const int*>(xq + 16 + 4 * t)));
        if constexpr (!M::kHalves) {
          const uint32_t a[4] = {f[0].lo, f[1].lo, f[0].hi, f[1].hi};
          int32_t c[4] = {0, 0, 0, 0};
          mma_s8(c, a, b_lo, b_hi);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int xb = c_row[j][i % 2] * nb_x + b;  // < 2^31: at most 32 tokens of a row's blocks
            const float dx = __ldg(qx.d + xb);
            float v = f[i / 2].scale[0] * dx * static_cast<float>(c[i]);
            if constexpr (M::kOff) v += f[i / 2].off[0] * __ldg(qx.s + xb);
            acc[j][i] += v;
          }
        } else {  // the two 16-element halves apart: the mma with the other half of A zero
          const uint32_t a_lo[4] = {f[0].lo, f[1].lo, 0u, 0u}, a_hi[4] = {0u, 0u, f[0].hi, f[1].hi};
          int32_t c_lo[4] = {0, 0, 0, 0}, c_hi[4] = {0, 0, 0, 0};
          mma_s8(c_lo, a_lo, b_lo, b_hi);
          mma_s8(c_hi, a_hi, b_lo, b_hi);
          int32_t x_lo[4] = {0, 0, 0, 0}, x_hi[4] = {0, 0, 0, 0};  // sums of x's halves (every row alike)
          if constexpr (M::kOff) {
            constexpr uint32_t kOnes = 0x01010101u;
            const uint32_t ones_lo[4] = {kOnes, kOnes, 0u, 0u}, ones_hi[4] = {0u, 0u, kOnes, kOnes};
            mma_s8(x_lo, ones_lo, b_lo, b_hi);
            mma_s8(x_hi, ones_hi, b_lo, b_hi);
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float dx = __ldg(qx.d + c_row[j][i % 2] * nb_x + b);
            const MmqFrag& fr = f[i / 2];
            float v = fr.scale[0] * static_cast<float>(c_lo[i]) + fr.scale[1] * static_cast<float>(c_hi[i]);
            if constexpr (M::kOff) {
              v += fr.off[0] * static_cast<float>(x_lo[i]) + fr.off[1] * static_cast<float>(x_hi[i]);
            }
            acc[j][i] += dx * v;
          }
        }
      }
    }
  }
  // The warps' partial sums, added in warp order.
  __shared__ float part[kWarps][J][4][32];
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][j][i][lane] = acc[j][i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < kWarps; ++k) s += part[k][j][i][lane];
      const int h = i / 2, n = j * 8 + 2 * t + i % 2;
      if (row0 + g + 8 * h < n_out && n < n_tok) yr[h][n * ys[h]] = s;
    }
}

template <class M>
void launch_format(const Parts& parts, int64_t n_in, int64_t n_out, QuantizedX qx, int64_t n_tok, cudaStream_t s) {
  const int n_blocks = static_cast<int>(n_in / 32);
  const dim3 grid(static_cast<unsigned>((n_out + 15) / 16));
  for (int64_t t0 = 0; t0 < n_tok; t0 += 8 * kMaxTiles) {
    const int n = static_cast<int>(std::min<int64_t>(n_tok - t0, 8 * kMaxTiles));
    const QuantizedX c = from_token(qx, t0);
    const Parts pc = from_token(parts, t0);
    switch ((n + 7) / 8) {
      case 1: launch_pdl(mmq_kernel<M, 1>, grid, kWarps * 32, s, pc, n_blocks, n_out, c, n); break;
      case 2: launch_pdl(mmq_kernel<M, 2>, grid, kWarps * 32, s, pc, n_blocks, n_out, c, n); break;
      case 3: launch_pdl(mmq_kernel<M, 3>, grid, kWarps * 32, s, pc, n_blocks, n_out, c, n); break;
      default: launch_pdl(mmq_kernel<M, 4>, grid, kWarps * 32, s, pc, n_blocks, n_out, c, n); break;
    }
    SLUICE_CUDA_LAUNCHED();
  }
}

}  // namespace

void launch_matmul_mmq(std::span<const WeightView> ws, std::span<float* const> ys, const QuantizedX& qx, int64_t n_tok,
                       cudaStream_t s) {
  with_q8_parts(ws, ys, qx, n_tok, [&](const Parts& parts, int64_t n_in, int64_t n_out) {
    with_mmq_format(ws[0].type, ws[0].layout, [&]<class M>() { launch_format<M>(parts, n_in, n_out, qx, n_tok, s); });
  });
}

}  // namespace sluice::cuda
