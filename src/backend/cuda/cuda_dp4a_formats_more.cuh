// The dp4a kernels' formats (cuda_dp4a_formats.cuh says what a format is) for
// the types past Q4_0, Q8_0, Q4_K, Q5_K and Q6_K, all in GGUF rows, and the
// dispatch over every format:
//
//   format    unit (weights)                 loads per unit                       x blocks     matrix aligned
//   Q4_1      one block (32)                 5 x 4 B                              1            4
//   Q5_0      one block (32)                 11 x 2 B                             1            2
//   Q5_1      one block (32)                 3 x 8 B                              1            8
//   IQ4_NL    one block (32)                 9 x 2 B                              1            2
//   IQ4_XS    sub-block s of a super-block   8 B header + 2 x 8 B of qs           1            8
//   Q2_K      64: 16 of each of the 4        4 x 4 B of qs, 8 B of scales, 4 B    4 halves     4
//             sub-block rows of a half       d | dmin
//   Q3_K      as Q2_K                        2 x 16 B (as 5 aligned 4 B words     4 halves     4
//                                            each), 12 B of scales (3 or 4), d
//
// The unit of Q2_K and Q3_K is Q6_K's: part (h, k) of a super-block, for
// j < 4 elements 128h + 32j + 16k + (0..15), sub-block 8h + 2j + k, against
// bytes 16k.. of x block 4h + j of the super-block (load_x16).
//   Q4_1, Q5_1 . x = d_w * d * sum(q_w q) + m_w * s        (x = d * q, s = d * sum q)
//   Q5_0 . x = d_w * (d * sum(q_w q) - 16 s)
//   IQ4_NL . x = d_w * d * sum(v[q_w] q)                  (v: the codebook, cuda_loads.cuh's iq4_lookup4)
//   IQ4_XS . x = d_w * (ls - 32) * d * sum(v[q_w] q)      for sub-block s's 6-bit ls
//   Q2_K . x = sum over sub-blocks: d_w * sc * d * sum(q_w q) - dmin_w * m * d * sum16(q)
//   Q3_K . x = sum over sub-blocks: d_w * (sc - 32) * d * sum((q_w - 4) q)
// Included by .cu files only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_dp4a_formats.cuh"
#include "backend/cuda/cuda_loads.cuh"
#include "quant/blocks_more.h"

namespace sluice::cuda {

// sum q_w q over a 32-element block whose nibble words lo[i], hi[i] (elements
// 4i.., 16 + 4i..) are expanded to one byte a weight.
__device__ __forceinline__ int dot32(const uint32_t (&lo)[4], const uint32_t (&hi)[4], const X32& x) {
  const int xs_lo[4] = {x.a.x, x.a.y, x.a.z, x.a.w}, xs_hi[4] = {x.b.x, x.b.y, x.b.z, x.b.w};
  int sumi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sumi = __dp4a(static_cast<int>(lo[i]), xs_lo[i], sumi);
    sumi = __dp4a(static_cast<int>(hi[i]), xs_hi[i], sumi);
  }
  return sumi;
}

// The other 32-element blocks in GGUF rows, a unit each: Q4_1 (20 bytes,
// 4-aligned) and Q5_1 (24, 8-aligned): d | m << 16 first, then Q5_1's 32
// fifth bits, then the 16 bytes of nibbles; Q5_0 (22, 2-aligned): d, the fifth
// bits, the nibbles, q - 16; IQ4_NL (18, 2-aligned): Q4_0's nibbles as
// codebook indices.
template <DType T>
struct Dp4aBlock32 {
  static constexpr bool kMin = T == DType::kQ4_1 || T == DType::kQ5_1;
  static constexpr bool kQ5 = T == DType::kQ5_0 || T == DType::kQ5_1;
  static constexpr int kElems = 32;
  static constexpr int kMaxUnroll = 4;
  static constexpr int kBytes = T == DType::kQ4_1   ? sizeof(BlockQ4_1)
                                : T == DType::kQ5_1 ? sizeof(BlockQ5_1)
                                : T == DType::kQ5_0 ? sizeof(BlockQ5_0)
                                                    : sizeof(BlockIq4Nl);
  struct Raw {
    uint32_t d, qh, q[4];  // d: Q4_1 / Q5_1's d | m << 16
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<32, kBytes>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b) {
    const uint8_t* p = r.q + static_cast<int64_t>(b) * kBytes;
    if constexpr (T == DType::kQ5_1) {
      const uint2 a = __ldg(reinterpret_cast<const uint2*>(p)), c = __ldg(reinterpret_cast<const uint2*>(p + 8)),
                  e = __ldg(reinterpret_cast<const uint2*>(p + 16));
      return {a.x, a.y, {c.x, c.y, e.x, e.y}};
    } else if constexpr (T == DType::kQ4_1) {
      return {ld32(p), 0u, {ld32(p + 4), ld32(p + 8), ld32(p + 12), ld32(p + 16)}};
    } else {
      const uint8_t* qs = p + (T == DType::kQ5_0 ? offsetof(BlockQ5_0, qs) : offsetof(BlockIq4Nl, qs));
      return {ld16(p), T == DType::kQ5_0 ? ld32_a2(p + offsetof(BlockQ5_0, qh)) : 0u,
              {ld32_a2(qs), ld32_a2(qs + 4), ld32_a2(qs + 8), ld32_a2(qs + 12)}};
    }
  }
  using X = X32;
  __device__ __forceinline__ static X load_x(const XRow& x, int b) {
    return load_x32<T != DType::kIQ4_NL>(x, b);
  }
  //   Q4_1, Q5_1: d * dx * sum + m * s    Q5_0: d * (dx * sum - 16 s)    IQ4_NL: d * dx * sum (codebook values)
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int) {
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = r.q[i] & 0x0f0f0f0fu;
      hi[i] = (r.q[i] >> 4) & 0x0f0f0f0fu;
      if constexpr (kQ5) {  // bit e of qh is element e's fifth bit
        lo[i] |= bits_to_bytes(r.qh >> (4 * i)) << 4;
        hi[i] |= bits_to_bytes(r.qh >> (16 + 4 * i)) << 4;
      }
      if constexpr (T == DType::kIQ4_NL) {
        lo[i] = iq4_lookup4(lo[i]);
        hi[i] = iq4_lookup4(hi[i]);
      }
    }
    const float d = f16(r.d & 0xffffu), sum = static_cast<float>(dot32(lo, hi, x));
    if constexpr (kMin) return d * x.d * sum + f16(r.d >> 16) * x.s;
    if constexpr (T == DType::kQ5_0) return d * (x.d * sum - 16.0f * x.s);
    return d * x.d * sum;
  }
};

// IQ4_XS (136-byte super-blocks, 8-aligned): unit u is sub-block s = u % 8 of
// super-block u / 8, its 16 bytes of qs as IQ4_NL's; the 8-byte header (d,
// scales_h, scales_l) is the same address for the super-block's 8 lanes.
struct Dp4aIq4Xs {
  static constexpr int kElems = 32;
  static constexpr int kMaxUnroll = 4;
  static constexpr int kBytes = sizeof(BlockIq4Xs);
  struct Raw {
    uint2 head;  // d | scales_h << 16, scales_l[0..3]
    uint2 q0, q1;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, kBytes>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int u) {
    const uint8_t* p = r.q + static_cast<int64_t>(u / 8) * kBytes;
    const uint2* qs = reinterpret_cast<const uint2*>(p + offsetof(BlockIq4Xs, qs) + 16 * (u % 8));
    return {__ldg(reinterpret_cast<const uint2*>(p)), __ldg(qs), __ldg(qs + 1)};
  }
  using X = X32;
  __device__ __forceinline__ static X load_x(const XRow& x, int u) { return load_x32<false>(x, u); }
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int u) {
    const int s = u % 8;
    const int ls = static_cast<int>(((r.head.y >> (4 * s)) & 15u) | ((r.head.x >> (16 + 2 * s)) & 3u) << 4);
    const uint32_t q[4] = {r.q0.x, r.q0.y, r.q1.x, r.q1.y};
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = iq4_lookup4(q[i] & 0x0f0f0f0fu);
      hi[i] = iq4_lookup4((q[i] >> 4) & 0x0f0f0f0fu);
    }
    return f16(r.head.x & 0xffffu) * static_cast<float>(ls - 32) * x.d * static_cast<float>(dot32(lo, hi, x));
  }
};

// What Q2_K and Q3_K share: Q6_K's unit and x (load_x16 with the sum of x
// times kByte: Q2_K's 1 for its mins, Q3_K's -4 offset).
template <int kSuperBytes, int kByte>
struct Dp4aHalves16 {
  static constexpr int kElems = 64;
  static constexpr int kBytes = kSuperBytes;
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, kBytes>(w, local, n_in);
  }
  __device__ __forceinline__ static const uint8_t* at(const RowAt& r, int u) {
    return r.q + static_cast<int64_t>(u / 4) * kBytes;
  }
  using X = X16;
  __device__ __forceinline__ static X load_x(const XRow& x, int u) {
    return load_x16<kByte>(x, 8 * static_cast<int64_t>(u / 4) + 4 * ((u % 4) / 2), u % 2);
  }
};

// Q2_K (84-byte super-blocks, 4-aligned): bits 2j of qs[32h + 16k + l] for
// l < 16; scale and min of sub-block 8h + 2j + k: byte 2j + k of scales[8h ..].
struct Dp4aQ2K : Dp4aHalves16<sizeof(BlockQ2_K), 1> {
  static constexpr int kMaxUnroll = 4;
  struct Raw {
    uint32_t q[4];
    uint32_t sc[2];  // scales[8h .. 8h + 7]
    uint32_t dm;     // d | dmin << 16
  };
  __device__ __forceinline__ static Raw load(const RowAt& r, int u) {
    const uint8_t* p = at(r, u);
    const int h = (u % 4) / 2, k = u % 2;
    const uint8_t* qs = p + offsetof(BlockQ2_K, qs) + 32 * h + 16 * k;
    const uint8_t* sc = p + offsetof(BlockQ2_K, scales) + 8 * h;
    return {{ld32(qs), ld32(qs + 4), ld32(qs + 8), ld32(qs + 12)}, {ld32(sc), ld32(sc + 4)},
            ld32(p + offsetof(BlockQ2_K, d))};
  }
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int u) {
    const int k = u % 2;
    float acc = 0.0f, acc_m = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int sum = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) sum = __dp4a(static_cast<int>((r.q[i] >> (2 * j)) & 0x03030303u), (&x.q[j].x)[i], sum);
      const uint32_t b = (r.sc[j / 2] >> (8 * (2 * (j % 2) + k))) & 0xffu;
      acc += static_cast<float>(b & 15u) * x.d[j] * static_cast<float>(sum);
      acc_m += static_cast<float>(b >> 4) * x.d[j] * static_cast<float>(x.off[j]);
    }
    return f16(r.dm & 0xffffu) * acc - f16(r.dm >> 16) * acc_m;
  }
};

// Q3_K (110-byte super-blocks, 2-aligned; the matrix 4-aligned): low bits 2j
// of qs[32h + 16k + l], high bit (4h + j) of hmask[16k + l], l < 16; the
// 6-bit scale of sub-block s = 8h + 2j + k: bits 4h.. of scales[s % 8] and
// bits 2 (s / 4).. of scales[8 + s % 4] (quant/blocks_more.h).
struct Dp4aQ3K : Dp4aHalves16<sizeof(BlockQ3_K), -4> {
  static constexpr int kMaxUnroll = 2;  // a unit's raw words take 16 registers
  struct Raw {
    WordsA2<4> qs, hm;
    WordsA2<3> sc;
    uint32_t d;
    uint32_t sel;  // a2_sel of the super-block
  };
  __device__ __forceinline__ static Raw load(const RowAt& r, int u) {
    const uint8_t* p = at(r, u);
    const int h = (u % 4) / 2, k = u % 2;
    return {load_words_a2<4>(p + offsetof(BlockQ3_K, qs) + 32 * h + 16 * k),
            load_words_a2<4>(p + offsetof(BlockQ3_K, hmask) + 16 * k),
            load_words_a2<3, true>(p + offsetof(BlockQ3_K, scales)), ld16(p + offsetof(BlockQ3_K, d)), a2_sel(p)};
  }
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int u) {
    const int h = (u % 4) / 2, k = u % 2;
    const uint32_t sc_lo[2] = {r.sc.word(0, r.sel), r.sc.word(1, r.sel)}, sc_hi = r.sc.word(2, r.sel);
    int sum[4] = {x.off[0], x.off[1], x.off[2], x.off[3]};  // the weights' -4
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t qw = r.qs.word(i, r.sel), hw = r.hm.word(i, r.sel) >> (4 * h);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t q = ((qw >> (2 * j)) & 0x03030303u) | (((hw >> j) & 0x01010101u) << 2);
        sum[j] = __dp4a(static_cast<int>(q), (&x.q[j].x)[i], sum[j]);
      }
    }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = 2 * j + k;  // s % 8 (and s % 4 = m % 4, s / 4 = 2h + j / 2)
      const uint32_t lo = (sc_lo[m / 4] >> (8 * (m % 4) + 4 * h)) & 15u;
      const uint32_t hi = (sc_hi >> (8 * (m % 4) + 2 * (2 * h + j / 2))) & 3u;
      acc += static_cast<float>(static_cast<int>(lo | hi << 4) - 32) * x.d[j] * static_cast<float>(sum[j]);
    }
    return f16(r.d) * acc;
  }
};

// f.template operator()<Format>() for a matrix that matmul_q8_takes.
template <class F>
void with_dp4a_format(DType type, WeightLayout layout, F&& f) {
  switch (type) {
    case DType::kQ4_K: f.template operator()<Dp4aKMin<false>>(); return;
    case DType::kQ5_K: f.template operator()<Dp4aKMin<true>>(); return;
    case DType::kQ6_K: f.template operator()<Dp4aQ6K>(); return;
    case DType::kQ4_1: f.template operator()<Dp4aBlock32<DType::kQ4_1>>(); return;
    case DType::kQ5_1: f.template operator()<Dp4aBlock32<DType::kQ5_1>>(); return;
    case DType::kQ5_0: f.template operator()<Dp4aBlock32<DType::kQ5_0>>(); return;
    case DType::kIQ4_NL: f.template operator()<Dp4aBlock32<DType::kIQ4_NL>>(); return;
    case DType::kIQ4_XS: f.template operator()<Dp4aIq4Xs>(); return;
    case DType::kQ2_K: f.template operator()<Dp4aQ2K>(); return;
    case DType::kQ3_K: f.template operator()<Dp4aQ3K>(); return;
    default:
      with_q8_layout(type, layout, [&]<bool Q8, bool Split>() { f.template operator()<Dp4aLegacy<Q8, Split>>(); });
  }
}

}  // namespace sluice::cuda
