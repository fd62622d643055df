// Flash attention for prefill (cuda_flash_attn.cuh).
//
// Block (tile, head): 4 warps, warp w owns query rows 16w .. 16w+15 of the
// tile. Per key tile of kKeys positions: the block copies K (row-major,
// [key][dim]) and V (transposed, [dim][key]) to shared memory as F16, then
// each warp computes S = Q K^T with mma.sync m16n8k16 (Q's fragments stay in
// registers for the whole walk), masks and scales S, updates its rows'
// running max and sums (online softmax, base 2), and adds P V to its output
// fragments, P taken straight from S's registers (an m16n8 accumulator pair is
// an m16k16 A fragment). The per-thread fragment layout (PTX ISA, mma.m16n8k16):
// thread (g = lane / 4, c = lane % 4) holds
//   A: rows g and g+8, columns 2c, 2c+1 and 2c+8, 2c+9
//   B: column g, rows 2c, 2c+1 and 2c+8, 2c+9
//   C: rows g and g+8, columns 2c, 2c+1
// so a row's values sit in the 4 threads of a quad (shuffles 1 and 2 reduce).
#include "backend/cuda/cuda_flash_attn.cuh"

#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_check.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "base/check.h"

namespace sluice::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kKeys = 64;  // key positions per tile
static_assert(16 * kWarps == kFlashRows);

__device__ __forceinline__ uint32_t h2(float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);  // .x = a (low half)
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c += a b for one m16n8k16 tile (F16 operands, float sums).
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#ifdef SLUICE_CUDA_EMU  // the CPU emulator (tests/cuda_emu) computes the tile over the warp's fragments
  ::sluice_emu::mma_m16n8k16_f16_f32(c, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Element e (a multiple of 8) of store row `row` of K or V (kv/kv_store.h's layout).
__device__ __forceinline__ const uint8_t* kv_at(const uint8_t* base, const KvLayerDev& kv, int64_t row, int e) {
  const int64_t b = row / kv.block_size, slot = row % kv.block_size;
  return base + b * kv.block_bytes + (int64_t{e / kv.slice_len} * kv.block_size + slot) * kv.slice_bytes +
         int64_t{e % kv.slice_len} * kv.elem_bytes;
}

// 8 consecutive elements (F16 or F32) as 4 words of 2 F16.
__device__ __forceinline__ uint4 load8(const uint8_t* p, int elem_bytes) {
  if (elem_bytes == 2) return *reinterpret_cast<const uint4*>(p);
  const float4 x = reinterpret_cast<const float4*>(p)[0], y = reinterpret_cast<const float4*>(p)[1];
  return make_uint4(h2(x.x, x.y), h2(x.z, x.w), h2(y.x, y.y), h2(y.z, y.w));
}

__device__ __forceinline__ int first_attended(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

template <int D>
__global__ void __launch_bounds__(kThreads) flash_kernel(FlashAttnDev a) {
  constexpr int kKp = D + 8;      // Ks row stride (halves): the B-fragment reads of a warp hit 32 banks
  constexpr int kVp = kKeys + 8;  // Vt row stride, likewise
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ __align__(16) __half ks[kKeys * kKp];
  __shared__ __align__(16) __half vt[D * kVp];
  pdl_trigger();  // cuda_pdl.cuh: a matmul after this one may start
  const FlashTile tile = a.tiles[blockIdx.x];
  const int h = blockIdx.y, kvh = h / (a.n_head / a.n_head_kv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
  const int64_t row_stride = int64_t{a.n_head} * D;
  const int e0 = kvh * D;
  const int r0 = 16 * warp, ra = r0 + g, rb = r0 + g + 8;  // this thread's two query rows in the tile
  const int pa = tile.pos + ra, pb = tile.pos + rb;        // their positions
  const int lo_a = first_attended(pa, a.window), lo_b = first_attended(pb, a.window);

  uint32_t qf[D / 16][4];  // Q's A fragments, k-step by k-step
  {
    const float* qa = tile.q + ra * row_stride + h * D;
    const float* qb = tile.q + rb * row_stride + h * D;
    const bool in_a = ra < tile.n_rows, in_b = rb < tile.n_rows;
    const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = 16 * kk + 2 * c4;
      const float2 a0 = in_a ? *reinterpret_cast<const float2*>(qa + c) : zero;
      const float2 b0 = in_b ? *reinterpret_cast<const float2*>(qb + c) : zero;
      const float2 a1 = in_a ? *reinterpret_cast<const float2*>(qa + c + 8) : zero;
      const float2 b1 = in_b ? *reinterpret_cast<const float2*>(qb + c + 8) : zero;
      qf[kk][0] = h2(a0.x, a0.y), qf[kk][1] = h2(b0.x, b0.y), qf[kk][2] = h2(a1.x, a1.y), qf[kk][3] = h2(b1.x, b1.y);
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // running max (base 2) and this thread's sums

  const int k_lo = first_attended(tile.pos, a.window), k_hi = tile.pos + tile.n_rows - 1;
  // The warp's rows: the last one present, and the first key any of them attends.
  const int w_last = tile.pos + min(r0 + 15, tile.n_rows - 1), w_lo = first_attended(tile.pos + r0, a.window);
  const float sc = a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e;
  for (int kb = k_lo; kb <= k_hi; kb += kKeys) {
    __syncthreads();  // the previous tile is used up
    // K: 8 dims per thread, dims fastest (16-byte stores along a row).
    for (int i = threadIdx.x; i < kKeys * (D / 8); i += kThreads) {
      const int j = i / (D / 8), e = 8 * (i % (D / 8)), p = kb + j;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (p <= k_hi) {
        const int64_t row = int64_t{a.tables[tile.table + p / a.kv.block_size]} * a.kv.block_size + p % a.kv.block_size;
        v = load8(kv_at(a.kv.k, a.kv, row, e0 + e), a.kv.elem_bytes);
      }
      *reinterpret_cast<uint4*>(&ks[j * kKp + e]) = v;
    }
    // V transposed: keys fastest, so a warp's 2-byte stores fill consecutive words.
    for (int i = threadIdx.x; i < kKeys * (D / 8); i += kThreads) {
      const int j = i % kKeys, e = 8 * (i / kKeys), p = kb + j;
      uint4 v = make_uint4(0, 0, 0, 0);  // zeros past the last key: P is 0 there, and 0 * 0 stays 0
      if (p <= k_hi) {
        const int64_t row = int64_t{a.tables[tile.table + p / a.kv.block_size]} * a.kv.block_size + p % a.kv.block_size;
        v = load8(kv_at(a.kv.v, a.kv, row, e0 + e), a.kv.elem_bytes);
      }
      const __half* hv = reinterpret_cast<const __half*>(&v);
#pragma unroll
      for (int k = 0; k < 8; ++k) vt[(e + k) * kVp + j] = hv[k];
    }
    __syncthreads();
    if (r0 >= tile.n_rows || kb > w_last || kb + kKeys - 1 < w_lo) continue;  // every score masked for this warp

    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        const __half* kr = &ks[(8 * n + g) * kKp + 16 * kk + 2 * c4];
        mma16816(s[n], qf[kk], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    // Scale (base 2), soft-cap, mask; the rows' maxima over the tile.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int p = kb + 8 * n + 2 * c4 + c;
        float va = s[n][c] * sc, vb = s[n][2 + c] * sc;
        if (a.softcap > 0.0f) va = a.softcap * kLog2e * tanhf(va), vb = a.softcap * kLog2e * tanhf(vb);
        va = (p >= lo_a && p <= pa) ? va : -INFINITY;
        vb = (p >= lo_b && p <= pb) ? vb : -INFINITY;
        s[n][c] = va, s[n][2 + c] = vb;
        mx_a = fmaxf(mx_a, va), mx_b = fmaxf(mx_b, vb);
      }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
    // A row with nothing attended yet keeps max -inf: its corrections are 1, its P 0.
    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a, base_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const float corr_a = exp2f(m_a - base_a), corr_b = exp2f(m_b - base_b);
    m_a = mn_a, m_b = mn_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
      s[n][0] = exp2f(s[n][0] - base_a), s[n][1] = exp2f(s[n][1] - base_a);
      s[n][2] = exp2f(s[n][2] - base_b), s[n][3] = exp2f(s[n][3] - base_b);
      sum_a += s[n][0] + s[n][1], sum_b += s[n][2] + s[n][3];
    }
    l_a = l_a * corr_a + sum_a, l_b = l_b * corr_b + sum_b;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] *= corr_a, o[n][1] *= corr_a, o[n][2] *= corr_b, o[n][3] *= corr_b;
    // O += P V, P's A fragments from S's accumulators (keys 16kk .. 16kk+15).
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint32_t pf[4] = {h2(s[2 * kk][0], s[2 * kk][1]), h2(s[2 * kk][2], s[2 * kk][3]),
                              h2(s[2 * kk + 1][0], s[2 * kk + 1][1]), h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const __half* vr = &vt[(8 * n + g) * kVp + 16 * kk + 2 * c4];
        mma16816(o[n], pf, *reinterpret_cast<const uint32_t*>(vr), *reinterpret_cast<const uint32_t*>(vr + 8));
      }
    }
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  // Every present row attends at least its own position, so l > 0 there.
  if (ra < tile.n_rows) {
    float* out = tile.out + ra * row_stride + h * D;
    const float inv = 1.0f / l_a;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(out + 8 * n + 2 * c4) = make_float2(o[n][0] * inv, o[n][1] * inv);
  }
  if (rb < tile.n_rows) {
    float* out = tile.out + rb * row_stride + h * D;
    const float inv = 1.0f / l_b;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(out + 8 * n + 2 * c4) = make_float2(o[n][2] * inv, o[n][3] * inv);
  }
}

}  // namespace

bool flash_attention_takes(int64_t head_dim, const KvLayerDev& kv) {
  if (head_dim != 64 && head_dim != 96 && head_dim != 128) return false;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return kv.slice_len % 8 == 0 && kv.slice_bytes % 16 == 0 && kv.block_bytes % 16 == 0 && aligned(kv.k) &&
         aligned(kv.v) && (kv.elem_bytes == 2 || kv.elem_bytes == 4);
}

void launch_flash_attention(const FlashAttnDev& a, cudaStream_t s) {
  CHECK(flash_attention_takes(a.head_dim, a.kv) && a.n_head % a.n_head_kv == 0);
  if (a.n_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_tiles), static_cast<unsigned>(a.n_head));
  switch (a.head_dim) {
    case 64: flash_kernel<64><<<grid, kThreads, 0, s>>>(a); break;
    case 96: flash_kernel<96><<<grid, kThreads, 0, s>>>(a); break;
    default: flash_kernel<128><<<grid, kThreads, 0, s>>>(a); break;
  }
  SLUICE_CUDA_LAUNCHED();
}

}  // namespace sluice::cuda
