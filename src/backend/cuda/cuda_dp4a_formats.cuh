// How the dp4a kernels (cuda_matmul_q8.cu) read each weight type they take.
// A format cuts a row into units, one lane's share at a time; it loads a
// unit's raw bytes and multiplies them with the matching x blocks of
// QuantizedX (32 int8 with d, s = d * sum q; cuda_matmul_q8.cuh):
//
//   format            unit (weights)               loads per unit                     x blocks
//   Q8_0 rows/split   one block (32)               17 x 2 B / 2 x 16 B + scale        1
//   Q4_0 rows/split   one block (32)               9 x 2 B / 16 B + scale             1
//   Q4_K rows         64: sub-blocks 2c, 2c + 1    16 B header + 2 x 16 B of qs       2
//                     of a super-block (c < 4)
//   Q5_K rows         as Q4_K                      as Q4_K + 2 x 16 B of qh           2
//   Q6_K rows         64: 16 of each of the 4      3 x 16 B (as 5 aligned 4 B words   4 halves
//                     sub-block rows of a half     each) + 8 B of scales + d
//
// Q4_K's 144-byte and Q5_K's 176-byte super-blocks start 16-byte aligned in a
// row (9 and 11 x 16), so with the matrix 16-byte aligned every load is a
// 16-byte one; the header (d, dmin, the 12 bytes of 6-bit scales and mins) and
// Q5_K's qh are the same addresses for the super-block's 4 lanes and cost one
// transaction. The dequantization is w = d * sc * q - dmin * m per 32-element
// sub-block, so with x = dx * qx:
//   sum w x = d * sc * dx * sum(q qx) - dmin * m * (dx * sum qx)      (the last factor is QuantizedX's s)
// Q6_K's 210-byte super-blocks are only 2-byte aligned (every other one 4),
// so its 16-byte spans are read as the aligned words around them, shifted by
// 0 or 2 bytes (cuda_loads.cuh's WordsA2); its 16-element sub-blocks take half
// an x block each, and the -32 offset is -32 times the sum of those 16 x bytes
// (summed once per token, in load_x16).
// The other types' formats: cuda_dp4a_formats_more.cuh.
// A lane's sum depends only on its unit and the token's x: the kernels add
// the units in one order whatever the batch. Included by .cu files only.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_q8_blocks.cuh"
#include "quant/blocks.h"
#include "quant/blocks_more.h"

namespace sluice::cuda {

// A token's quantized x: its int8 row and its blocks' d and s.
struct XRow {
  const int8_t* q;
  const float* d;
  const float* s;
};

__device__ __forceinline__ XRow x_row_of(const QuantizedX& qx, int64_t row) {
  const int64_t nb = qx.n_in / 32;
  return {qx.q + row * qx.n_in, qx.d + row * nb, qx.s + row * nb};
}

// A token's x block b, for units of one 32-element block: its 32 int8 (a:
// elements 0..15, b: 16..31), d, and s when kSum (the formats whose weights
// have an offset or a min).
struct X32 {
  int4 a, b;
  float d, s;
};
template <bool kSum>
__device__ __forceinline__ X32 load_x32(const XRow& x, int b) {
  const int4* xq = reinterpret_cast<const int4*>(x.q + static_cast<int64_t>(b) * 32);
  return {__ldg(xq), __ldg(xq + 1), __ldg(x.d + b), kSum ? __ldg(x.s + b) : 0.0f};
}

// A token's x for units of 4 runs of 16 (Q6_K, Q3_K, Q2_K): for k < 4, the 16
// bytes at 16j of x block b + k, that block's d, and off = kByte times the sum
// of the 16 bytes (the weights' offset, or Q2_K's min term, summed once per
// token rather than per weight row).
struct X16 {
  int4 q[4];
  float d[4];
  int off[4];
};
template <int kByte>
__device__ __forceinline__ X16 load_x16(const XRow& x, int64_t b, int j) {
  constexpr int kW = static_cast<int>((static_cast<uint32_t>(kByte) & 0xffu) * 0x01010101u);  // kByte per byte
  X16 r;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    r.q[k] = __ldg(reinterpret_cast<const int4*>(x.q + (b + k) * 32 + 16 * j));
    r.d[k] = __ldg(x.d + b + k);
    r.off[k] = __dp4a(kW, r.q[k].w, __dp4a(kW, r.q[k].z, __dp4a(kW, r.q[k].y, __dp4a(kW, r.q[k].x, 0))));
  }
  return r;
}

// Q4_0 / Q8_0 in GGUF rows (Split false) or with the scales split off
// (quant/split_scales.h): a unit is one block of 32.
template <bool Q8, bool Split>
struct Dp4aLegacy {
  static constexpr int kElems = 32;
  static constexpr int kMaxUnroll = 4;  // units a lane may load ahead
  struct Raw {
    uint32_t d;
    int w[Q8 ? 8 : 4];
  };

  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t n_rows, int64_t n_in) {
    return row_at<Q8, Split>(w, local, n_rows, static_cast<int>(n_in / 32));
  }

  __device__ __forceinline__ static Raw load(const RowAt& r, int b) {
    Raw blk;
    if constexpr (Split) {
      const uint4* p = reinterpret_cast<const uint4*>(r.q + static_cast<int64_t>(b) * (Q8 ? 32 : 16));
      const uint4 a = __ldg(p);
      blk.w[0] = static_cast<int>(a.x), blk.w[1] = static_cast<int>(a.y);
      blk.w[2] = static_cast<int>(a.z), blk.w[3] = static_cast<int>(a.w);
      if constexpr (Q8) {
        const uint4 c = __ldg(p + 1);
        blk.w[4] = static_cast<int>(c.x), blk.w[5] = static_cast<int>(c.y);
        blk.w[6] = static_cast<int>(c.z), blk.w[7] = static_cast<int>(c.w);
      }
      blk.d = __ldg(r.d + b);
    } else {
      const uint8_t* p = r.q + static_cast<int64_t>(b) * (Q8 ? 34 : 18);
      blk.d = ld16(p);
#pragma unroll
      for (int i = 0; i < (Q8 ? 8 : 4); ++i) blk.w[i] = static_cast<int>(ld32_a2(p + 2 + 4 * i));
    }
    return blk;
  }

  using X = X32;
  __device__ __forceinline__ static X load_x(const XRow& x, int b) { return load_x32<!Q8>(x, b); }

  // d_w * (d * sum q_w q - [8 s]) for block b and the token's x block b.
  __device__ __forceinline__ static float dot(const Raw& blk, const X& x, int) {
    const int4 xa = x.a, xb = x.b;
    const float d = x.d;
    int sumi = 0;
    if constexpr (Q8) {
      sumi = __dp4a(blk.w[0], xa.x, sumi);
      sumi = __dp4a(blk.w[1], xa.y, sumi);
      sumi = __dp4a(blk.w[2], xa.z, sumi);
      sumi = __dp4a(blk.w[3], xa.w, sumi);
      sumi = __dp4a(blk.w[4], xb.x, sumi);
      sumi = __dp4a(blk.w[5], xb.y, sumi);
      sumi = __dp4a(blk.w[6], xb.z, sumi);
      sumi = __dp4a(blk.w[7], xb.w, sumi);
      return f16(blk.d) * d * static_cast<float>(sumi);
    } else {
      // qs[j] = q[j] | q[j + 16] << 4: word i holds elements 4i..4i+3 (low
      // nibbles) and 16+4i..16+4i+3 (high nibbles).
      const int xs_lo[4] = {xa.x, xa.y, xa.z, xa.w};
      const int xs_hi[4] = {xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sumi = __dp4a(blk.w[i] & 0x0f0f0f0f, xs_lo[i], sumi);
        sumi = __dp4a((blk.w[i] >> 4) & 0x0f0f0f0f, xs_hi[i], sumi);
      }
      return f16(blk.d) * (d * static_cast<float>(sumi) - 8.0f * x.s);
    }
  }
};

// Q4_K (Q5 false) and Q5_K in GGUF rows: unit u is part c = u % 4 of
// super-block u / 4, its elements 64c .. 64c + 63 (sub-blocks 2c and 2c + 1),
// whose quants are qs[32c .. 32c + 31]: low nibbles sub-block 2c, high
// nibbles 2c + 1. Q5_K's fifth bit of element 64c + 32v + l is bit 2c + v of
// qh[l] (quant/blocks_more.h), the 32 bytes of qh read by each of the 4 lanes.
template <bool Q5>
struct Dp4aKMin {
  static constexpr int kElems = 64;
  static constexpr int kMaxUnroll = Q5 ? 2 : 4;  // Q5_K's raw words take 20 registers
  static constexpr int kBytes = Q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);  // 176, 144: 16-byte multiples
  static constexpr int kQs = Q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  struct Raw {
    uint4 head;     // d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
    uint4 q0, q1;   // qs[32c .. 32c + 15], qs[32c + 16 .. 32c + 31]
    uint4 h[Q5 ? 2 : 1];  // Q5_K: qh[0 .. 15], qh[16 .. 31] (Q4_K: unused)
  };

  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, kBytes>(w, local, n_in);
  }

  __device__ __forceinline__ static Raw load(const RowAt& r, int u) {
    const uint8_t* p = r.q + static_cast<int64_t>(u / 4) * kBytes;
    const uint4* qs = reinterpret_cast<const uint4*>(p + kQs + 32 * (u % 4));
    Raw raw;
    raw.head = __ldg(reinterpret_cast<const uint4*>(p));
    raw.q0 = __ldg(qs);
    raw.q1 = __ldg(qs + 1);
    if constexpr (Q5) {
      const uint4* qh = reinterpret_cast<const uint4*>(p + offsetof(BlockQ5_K, qh));
      raw.h[0] = __ldg(qh);
      raw.h[1] = __ldg(qh + 1);
    }
    return raw;
  }

  // The token's x blocks 2u, 2u + 1 (sub-blocks 2c, 2c + 1).
  struct X {
    int4 q[4];
    float d[2], s[2];
  };
  __device__ __forceinline__ static X load_x(const XRow& x, int u) {
    const int4* xq = reinterpret_cast<const int4*>(x.q + static_cast<int64_t>(u) * 64);
    const int64_t b = 2 * static_cast<int64_t>(u);
    return {{__ldg(xq), __ldg(xq + 1), __ldg(xq + 2), __ldg(xq + 3)},
            {__ldg(x.d + b), __ldg(x.d + b + 1)},
            {__ldg(x.s + b), __ldg(x.s + b + 1)}};
  }

  // d * (sc0 * d0 * sum0 + sc1 * d1 * sum1) - dmin * (m0 * s0 + m1 * s1) for unit u.
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int u) {
    const int c = u % 4;
    // Bytes 2c and 2c + 1 of the 8 scales and of the 8 mins (quant/blocks.h: q4_k_scales_mins).
    const uint32_t sc = c < 2 ? r.head.y & 0x3f3f3f3fu : (r.head.w & 0x0f0f0f0fu) | ((r.head.y >> 2) & 0x30303030u);
    const uint32_t m =
        c < 2 ? r.head.z & 0x3f3f3f3fu : ((r.head.w >> 4) & 0x0f0f0f0fu) | ((r.head.z >> 2) & 0x30303030u);
    const int sh = 16 * (c % 2);
    const float sc0 = static_cast<float>((sc >> sh) & 0xff), sc1 = static_cast<float>((sc >> (sh + 8)) & 0xff);
    const float m0 = static_cast<float>((m >> sh) & 0xff), m1 = static_cast<float>((m >> (sh + 8)) & 0xff);
    const uint32_t w[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    const int x0[8] = {x.q[0].x, x.q[0].y, x.q[0].z, x.q[0].w, x.q[1].x, x.q[1].y, x.q[1].z, x.q[1].w};
    const int x1[8] = {x.q[2].x, x.q[2].y, x.q[2].z, x.q[2].w, x.q[3].x, x.q[3].y, x.q[3].z, x.q[3].w};
    int sum0 = 0, sum1 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t lo = w[i] & 0x0f0f0f0fu, hi = (w[i] >> 4) & 0x0f0f0f0fu;
      if constexpr (Q5) {  // qh word i: bytes 4i .. 4i + 3 of qh, as w[i] of qs
        const uint4& hv = r.h[i / 4];
        const uint32_t qh = i % 4 == 0 ? hv.x : i % 4 == 1 ? hv.y : i % 4 == 2 ? hv.z : hv.w;
        lo |= ((qh >> (2 * c)) & 0x01010101u) << 4;
        hi |= ((qh >> (2 * c + 1)) & 0x01010101u) << 4;
      }
      sum0 = __dp4a(static_cast<int>(lo), x0[i], sum0);
      sum1 = __dp4a(static_cast<int>(hi), x1[i], sum1);
    }
    const float d = f16(r.head.x & 0xffffu), dmin = f16(r.head.x >> 16);
    return d * (sc0 * x.d[0] * static_cast<float>(sum0) + sc1 * x.d[1] * static_cast<float>(sum1)) -
           dmin * (m0 * x.s[0] + m1 * x.s[1]);
  }
};

// Q6_K in GGUF rows: unit u is part (h, j) = ((u % 4) / 2, u % 2) of
// super-block u / 4: for k < 4, elements 128h + 32k + 16j + (0..15), sub-block
// 8h + 2k + j. Their low 4 bits are bytes 16j.. of ql[64h ..] (k even: low
// nibbles, k = 0, 2) and of ql[64h + 32 ..] (k = 1, 3), their high 2 bits bits
// 2k of qh[32h + 16j ..] (quant/blocks.h's diagram).
struct Dp4aQ6K {
  static constexpr int kElems = 64;
  static constexpr int kMaxUnroll = 2;  // a unit's raw words take 19 registers
  static constexpr int kBytes = sizeof(BlockQ6_K);  // 210
  struct Raw {
    WordsA2<4> lo0, lo1, hi;  // ql[64h + 16j ..], ql[64h + 32 + 16j ..], qh[32h + 16j ..]
    uint32_t sc[2];           // scales[8h .. 8h + 7]
    uint32_t d;
    uint32_t sel;  // a2_sel of the super-block
  };

  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, kBytes>(w, local, n_in);
  }

  __device__ __forceinline__ static Raw load(const RowAt& r, int u) {
    const uint8_t* p = r.q + static_cast<int64_t>(u / 4) * kBytes;
    const int h = (u % 4) / 2, j = u % 2;
    const uint8_t* sc = p + offsetof(BlockQ6_K, scales) + 8 * h;
    return {load_words_a2<4>(p + 64 * h + 16 * j), load_words_a2<4>(p + 64 * h + 32 + 16 * j),
            load_words_a2<4>(p + offsetof(BlockQ6_K, qh) + 32 * h + 16 * j), {ld32_a2(sc), ld32_a2(sc + 4)},
            ld16(p + offsetof(BlockQ6_K, d)), a2_sel(p)};
  }

  // The token's x: for k < 4, bytes 16j.. of block 8 (u / 4) + 4h + k, with -32 times their sum.
  using X = X16;
  __device__ __forceinline__ static X load_x(const XRow& x, int u) {
    return load_x16<-32>(x, 8 * static_cast<int64_t>(u / 4) + 4 * ((u % 4) / 2), u % 2);
  }

  // d * sum_k sc_k * d_k * sum (q - 32) q_x over the unit's 4 runs of 16.
  __device__ __forceinline__ static float dot(const Raw& r, const X& x, int u) {
    const int j = u % 2;
    int sum[4] = {x.off[0], x.off[1], x.off[2], x.off[3]};  // the weights' -32
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t a = r.lo0.word(i, r.sel), b = r.lo1.word(i, r.sel), hb = r.hi.word(i, r.sel);
      const uint32_t q[4] = {(a & 0x0f0f0f0fu) | ((hb << 4) & 0x30303030u),
                             (b & 0x0f0f0f0fu) | ((hb << 2) & 0x30303030u),
                             ((a >> 4) & 0x0f0f0f0fu) | (hb & 0x30303030u),
                             ((b >> 4) & 0x0f0f0f0fu) | ((hb >> 2) & 0x30303030u)};
      const int xs[4] = {(&x.q[0].x)[i], (&x.q[1].x)[i], (&x.q[2].x)[i], (&x.q[3].x)[i]};
#pragma unroll
      for (int k = 0; k < 4; ++k) sum[k] = __dp4a(static_cast<int>(q[k]), xs[k], sum[k]);
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // scale of sub-block 8h + 2k + j: byte j + 2k of scales[8h ..]
      const int sc = static_cast<int8_t>(r.sc[k / 2] >> (8 * (j + 2 * (k % 2))));
      acc += static_cast<float>(sc) * x.d[k] * static_cast<float>(sum[k]);
    }
    return f16(r.d) * acc;
  }
};

}  // namespace sluice::cuda
