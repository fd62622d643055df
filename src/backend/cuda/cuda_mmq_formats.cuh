// How the int8 tensor-core kernel (cuda_mmq.cu) reads each weight type: lane
// (g, t) of a warp holds, for each of its two rows (g and g + 8 of the
// block's 16) and each block b of 32 weights (against x block b), the A
// fragment words for k = 4t .. 4t + 3 (lo) and 16 + 4t .. (hi) as int8, and
// the block's float coefficients. A format loads the lane's raw bytes
// (load: issued ahead of use, several blocks at a time) and turns them into
// that (frag: where they are used):
//
//   kHalves false: y += scale[0] * d_x * dot + off[0] * s_x        (one k32 mma; off only when kOff)
//   kHalves true:  y += d_x * (scale[0] * dot_lo + scale[1] * dot_hi
//                              + off[0] * sum_lo + off[1] * sum_hi)  (16-element sub-blocks)
//
// dot is the int32 sum of the 32 weights times x's int8; dot_lo / dot_hi the
// sums over k < 16 and k >= 16 (the mma with the other half of A zero), and
// sum_lo / sum_hi the sums of x's int8 over those halves (an mma with A all
// ones; Q2_K's mins alone need them). Weights with an offset that fits go in
// signed (Q6_K's q - 32, Q3_K's q - 4); the others unsigned with the offset
// or min through s_x (QuantizedX's d * sum q), as the dp4a formats do.
//
//   format        lane's loads per row and block                     coefficients
//   Q8_0, Q4_0    rows: 2-byte; split: 4-byte words and the scale    d; Q4_0 off -8 d
//   Q4_1, Q5_1    d|m, [qh], one 4-byte word of qs                   d, off m
//   Q5_0, IQ4_NL  2-byte loads                                        d (Q5_0 off -16 d)
//   Q4_K, Q5_K    16-byte header, 2 words of qs (+ 2 of qh)          d sc, off -dmin m (sub-block b % 8)
//   IQ4_XS        8-byte header, one word of qs                      d (ls - 32)
//   Q6_K, Q3_K    2-byte loads (2-aligned super-blocks)              per 16: d sc (Q3_K: d (sc - 32))
//   Q2_K          2 words of qs, 2 scale bytes, d|dmin               per 16: d sc, off -dmin m
// Included by .cu files only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_loads.cuh"
#include "backend/cuda/cuda_q8_blocks.cuh"
#include "quant/blocks.h"
#include "quant/blocks_more.h"

namespace sluice::cuda {

struct MmqFrag {
  uint32_t lo, hi;       // A words: k = 4t .. 4t + 3, 16 + 4t .. 16 + 4t + 3
  float scale[2], off[2];  // [0] only unless kHalves
};

// q - 2^kBit per byte, as int8, for bytes q < 2^(kBit + 1): flipping bit kBit
// subtracts it from the large ones and adds it to the small ones, which then
// need the bits above set.
template <int kBit>
__device__ __forceinline__ uint32_t mmq_minus_half(uint32_t q) {
  constexpr uint32_t kB = 0x01010101u << kBit;
  constexpr uint32_t kAbove = (0x100u >> kBit) - 2;  // bits kBit + 1 .. 7 of a byte, over bit kBit
  return (q ^ kB) | ((~q & kB) * kAbove);
}

// Q4_0 / Q8_0, GGUF rows or split scales.
template <bool Q8, bool Split>
struct MmqLegacy {
  static constexpr bool kHalves = false, kOff = !Q8;
  static constexpr int kUnroll = 4;  // blocks a warp loads before using them
  struct Raw {
    uint32_t d, lo, hi;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t n_rows, int64_t n_in) {
    return row_at<Q8, Split>(w, local, n_rows, static_cast<int>(n_in / 32));
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    Raw w;
    if constexpr (Split) {
      const uint8_t* q = r.q + static_cast<int64_t>(b) * kQuantBytes<Q8>;
      w.lo = __ldg(reinterpret_cast<const uint32_t*>(q + 4 * t));
      w.hi = Q8 ? __ldg(reinterpret_cast<const uint32_t*>(q + 16 + 4 * t)) : 0u;
      w.d = __ldg(r.d + b);
    } else {
      const uint8_t* p = r.q + static_cast<int64_t>(b) * (kQuantBytes<Q8> + 2);
      w.d = ld16(p);
      w.lo = ld32_a2(p + 2 + 4 * t);
      w.hi = Q8 ? ld32_a2(p + 2 + 16 + 4 * t) : 0u;
    }
    return w;
  }
  // Q4_0's quants go in as their unsigned nibbles 0..15, the -8 through s_x.
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int, int) {
    const float d = f16(w.d);
    if constexpr (Q8) return {w.lo, w.hi, {d, 0.0f}, {0.0f, 0.0f}};
    return {w.lo & 0x0f0f0f0fu, (w.lo >> 4) & 0x0f0f0f0fu, {d, 0.0f}, {-8.0f * d, 0.0f}};
  }
};

// The other 32-element blocks in GGUF rows: Q4_1, Q5_1 (d | m first, then
// Q5_1's 32 fifth bits), Q5_0 (d, qh, qs; 2-aligned), IQ4_NL (d, qs; 2-aligned).
template <DType T>
struct MmqBlock32 {
  static constexpr bool kMin = T == DType::kQ4_1 || T == DType::kQ5_1;
  static constexpr bool kQ5 = T == DType::kQ5_0 || T == DType::kQ5_1;
  static constexpr bool kHalves = false, kOff = T != DType::kIQ4_NL;
  static constexpr int kUnroll = 4;
  static constexpr int kBytes = T == DType::kQ4_1   ? sizeof(BlockQ4_1)
                                : T == DType::kQ5_1 ? sizeof(BlockQ5_1)
                                : T == DType::kQ5_0 ? sizeof(BlockQ5_0)
                                                    : sizeof(BlockIq4Nl);
  struct Raw {
    uint32_t d, qh, q;  // q: qs[4t .. 4t + 3]
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<32, kBytes>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b) * kBytes;
    if constexpr (T == DType::kQ4_1) return {ld32(p), 0u, ld32(p + offsetof(BlockQ4_1, qs) + 4 * t)};
    if constexpr (T == DType::kQ5_1) {
      return {ld32(p), ld32(p + offsetof(BlockQ5_1, qh)), ld32(p + offsetof(BlockQ5_1, qs) + 4 * t)};
    }
    if constexpr (T == DType::kQ5_0) {
      return {ld16(p), ld32_a2(p + offsetof(BlockQ5_0, qh)), ld32_a2(p + offsetof(BlockQ5_0, qs) + 4 * t)};
    }
    return {ld16(p), 0u, ld32_a2(p + offsetof(BlockIq4Nl, qs) + 4 * t)};
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int, int t) {
    uint32_t lo = w.q & 0x0f0f0f0fu, hi = (w.q >> 4) & 0x0f0f0f0fu;
    if constexpr (T == DType::kIQ4_NL) {
      lo = iq4_lookup4(lo);
      hi = iq4_lookup4(hi);
    }
    if constexpr (kQ5) {  // bit e of qh is element e's fifth bit
      lo |= bits_to_bytes(w.qh >> (4 * t)) << 4;
      hi |= bits_to_bytes(w.qh >> (16 + 4 * t)) << 4;
    }
    const float d = f16(w.d & 0xffffu);
    const float off = kMin ? f16(w.d >> 16) : T == DType::kQ5_0 ? -16.0f * d : 0.0f;
    return {lo, hi, {d, 0.0f}, {off, 0.0f}};
  }
};

// Q4_K / Q5_K (16-byte aligned super-blocks): block b is sub-block s = b % 8
// of super-block b / 8, its quants the low (s even) or high nibbles of
// qs[32 (s / 2) ..], Q5_K's fifth bits bit s of qh[..].
template <bool Q5>
struct MmqKMin {
  static constexpr bool kHalves = false, kOff = true;
  static constexpr int kUnroll = 2;  // 4 spill at 16 tokens (the 16-byte headers)
  static constexpr int kBytes = Q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  static constexpr int kQs = Q5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  struct Raw {
    uint4 head;  // d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
    uint32_t q_lo, q_hi, h_lo, h_hi;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, kBytes>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b / 8) * kBytes;
    const uint8_t* qs = p + kQs + 32 * ((b % 8) / 2) + 4 * t;
    Raw w;
    w.head = __ldg(reinterpret_cast<const uint4*>(p));
    w.q_lo = ld32(qs);
    w.q_hi = ld32(qs + 16);
    if constexpr (Q5) {
      w.h_lo = ld32(p + offsetof(BlockQ5_K, qh) + 4 * t);
      w.h_hi = ld32(p + offsetof(BlockQ5_K, qh) + 16 + 4 * t);
    }
    return w;
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int b, int) {
    const int s = b % 8, sh = 4 * (s % 2);
    uint32_t lo = (w.q_lo >> sh) & 0x0f0f0f0fu, hi = (w.q_hi >> sh) & 0x0f0f0f0fu;
    if constexpr (Q5) {
      lo |= ((w.h_lo >> s) & 0x01010101u) << 4;
      hi |= ((w.h_hi >> s) & 0x01010101u) << 4;
    }
    const uint2 sm = k_scale_min(w.head.y, w.head.z, w.head.w, s);
    return {lo, hi, {f16(w.head.x & 0xffffu) * static_cast<float>(sm.x), 0.0f},
            {-f16(w.head.x >> 16) * static_cast<float>(sm.y), 0.0f}};
  }
};

// IQ4_XS (8-byte aligned super-blocks): block b is sub-block s = b % 8, its
// 16 bytes of qs as IQ4_NL's.
struct MmqIq4Xs {
  static constexpr bool kHalves = false, kOff = false;
  static constexpr int kUnroll = 4;
  struct Raw {
    uint2 head;  // d | scales_h << 16, scales_l[0..3]
    uint32_t q;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, sizeof(BlockIq4Xs)>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b / 8) * sizeof(BlockIq4Xs);
    return {__ldg(reinterpret_cast<const uint2*>(p)), ld32(p + offsetof(BlockIq4Xs, qs) + 16 * (b % 8) + 4 * t)};
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int b, int) {
    const int s = b % 8;
    const int ls = static_cast<int>(((w.head.y >> (4 * s)) & 15u) | ((w.head.x >> (16 + 2 * s)) & 3u) << 4);
    return {iq4_lookup4(w.q & 0x0f0f0f0fu), iq4_lookup4((w.q >> 4) & 0x0f0f0f0fu),
            {f16(w.head.x & 0xffffu) * static_cast<float>(ls - 32), 0.0f}, {0.0f, 0.0f}};
  }
};

// Q6_K (2-byte aligned super-blocks): block b = 32 elements 128h + 32q + l
// (s = b % 8 = 4h + q) of super-block b / 8: low 4 bits the low (q < 2) or
// high nibbles of ql[64h + 32 (q % 2) + l], high 2 bits bits 2q of qh[32h + l];
// the sub-blocks of 16 are 2s and 2s + 1.
struct MmqQ6K {
  static constexpr bool kHalves = true, kOff = false;
  static constexpr int kUnroll = 2;  // 4 spill at 16 tokens
  struct Raw {
    uint32_t ql_lo, ql_hi, qh_lo, qh_hi, sc, d;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, sizeof(BlockQ6_K)>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b / 8) * sizeof(BlockQ6_K);
    const int s = b % 8, h = s / 4, q = s % 4;
    const uint8_t* ql = p + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (q % 2) + 4 * t;
    const uint8_t* qh = p + offsetof(BlockQ6_K, qh) + 32 * h + 4 * t;
    return {ld32_a2(ql), ld32_a2(ql + 16), ld32_a2(qh), ld32_a2(qh + 16),
            ld16(p + offsetof(BlockQ6_K, scales) + 2 * s), ld16(p + offsetof(BlockQ6_K, d))};
  }
  __device__ __forceinline__ static uint32_t quants(uint32_t ql, uint32_t qh, int q) {
    return mmq_minus_half<5>(((ql >> (4 * (q / 2))) & 0x0f0f0f0fu) | (((qh >> (2 * q)) & 0x03030303u) << 4));
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int b, int) {
    const int q = b % 4;
    const float d = f16(w.d);
    return {quants(w.ql_lo, w.qh_lo, q), quants(w.ql_hi, w.qh_hi, q),
            {d * static_cast<float>(static_cast<int8_t>(w.sc & 0xffu)), d * static_cast<float>(static_cast<int8_t>(w.sc >> 8))},
            {0.0f, 0.0f}};
  }
};

// Q3_K (2-byte aligned super-blocks): block b = 32 elements 128h + 32j + l
// (s = b % 8 = 4h + j): low bits bits 2j of qs[32h + l], high bit bit 4h + j
// of hmask[l]; sub-blocks of 16 are 2s and 2s + 1, whose 6-bit scales are
// bits 4 (2s / 8).. of scales[2s % 8 ..] and bits 2 (2s / 4).. of
// scales[8 + 2s % 4 ..] (two adjacent bytes each).
struct MmqQ3K {
  static constexpr bool kHalves = true, kOff = false;
  static constexpr int kUnroll = 2;  // 4 spill at 16 tokens
  struct Raw {
    uint32_t q_lo, q_hi, m_lo, m_hi, sc_lo, sc_hi, d;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, sizeof(BlockQ3_K)>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b / 8) * sizeof(BlockQ3_K);
    const int s = b % 8;
    const uint8_t* qs = p + offsetof(BlockQ3_K, qs) + 32 * (s / 4) + 4 * t;
    const uint8_t* hm = p + offsetof(BlockQ3_K, hmask) + 4 * t;
    const uint8_t* sc = p + offsetof(BlockQ3_K, scales);
    return {ld32_a2(qs), ld32_a2(qs + 16), ld32_a2(hm), ld32_a2(hm + 16), ld16(sc + (2 * s) % 8),
            ld16(sc + 8 + (2 * s) % 4), ld16(p + offsetof(BlockQ3_K, d))};
  }
  __device__ __forceinline__ static uint32_t quants(uint32_t q, uint32_t m, int s) {
    const int j = s % 4;
    return mmq_minus_half<2>(((q >> (2 * j)) & 0x03030303u) | (((m >> (4 * (s / 4) + j)) & 0x01010101u) << 2));
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int b, int) {
    const int s = b % 8, s16 = 2 * s;
    const float d = f16(w.d);
    float scale[2];
#pragma unroll
    for (int v = 0; v < 2; ++v) {  // sub-block s16 + v: byte v of each pair
      const uint32_t lo = (w.sc_lo >> (8 * v + 4 * (s16 / 8))) & 15u;
      const uint32_t hi = (w.sc_hi >> (8 * v + 2 * ((s16 + v) / 4))) & 3u;
      scale[v] = d * static_cast<float>(static_cast<int>(lo | hi << 4) - 32);
    }
    return {quants(w.q_lo, w.m_lo, s), quants(w.q_hi, w.m_hi, s), {scale[0], scale[1]}, {0.0f, 0.0f}};
  }
};

// Q2_K (4-byte aligned super-blocks): block b = 32 elements 128h + 32j + l
// (s = b % 8 = 4h + j): bits 2j of qs[32h + l]; sub-blocks of 16 are 2s and
// 2s + 1, scale (low nibble) and min (high) bytes 2s, 2s + 1 of scales.
struct MmqQ2K {
  static constexpr bool kHalves = true, kOff = true;
  static constexpr int kUnroll = 2;  // 4 spill at 16 tokens
  struct Raw {
    uint32_t q_lo, q_hi, sc, dm;
  };
  __device__ __forceinline__ static RowAt row(const uint8_t* w, int64_t local, int64_t, int64_t n_in) {
    return block_row<256, sizeof(BlockQ2_K)>(w, local, n_in);
  }
  __device__ __forceinline__ static Raw load(const RowAt& r, int b, int t) {
    const uint8_t* p = r.q + static_cast<int64_t>(b / 8) * sizeof(BlockQ2_K);
    const int s = b % 8;
    const uint8_t* qs = p + offsetof(BlockQ2_K, qs) + 32 * (s / 4) + 4 * t;
    return {ld32(qs), ld32(qs + 16), ld16(p + offsetof(BlockQ2_K, scales) + 2 * s), ld32(p + offsetof(BlockQ2_K, d))};
  }
  __device__ __forceinline__ static MmqFrag frag(const Raw& w, int b, int) {
    const int j = b % 4;
    const float d = f16(w.dm & 0xffffu), dmin = f16(w.dm >> 16);
    const uint32_t s0 = w.sc & 0xffu, s1 = (w.sc >> 8) & 0xffu;
    return {(w.q_lo >> (2 * j)) & 0x03030303u, (w.q_hi >> (2 * j)) & 0x03030303u,
            {d * static_cast<float>(s0 & 15u), d * static_cast<float>(s1 & 15u)},
            {-dmin * static_cast<float>(s0 >> 4), -dmin * static_cast<float>(s1 >> 4)}};
  }
};

// f.template operator()<Format>() for a matrix that matmul_q8_takes.
template <class F>
void with_mmq_format(DType type, WeightLayout layout, F&& f) {
  switch (type) {
    case DType::kQ4_1: f.template operator()<MmqBlock32<DType::kQ4_1>>(); return;
    case DType::kQ5_1: f.template operator()<MmqBlock32<DType::kQ5_1>>(); return;
    case DType::kQ5_0: f.template operator()<MmqBlock32<DType::kQ5_0>>(); return;
    case DType::kIQ4_NL: f.template operator()<MmqBlock32<DType::kIQ4_NL>>(); return;
    case DType::kQ4_K: f.template operator()<MmqKMin<false>>(); return;
    case DType::kQ5_K: f.template operator()<MmqKMin<true>>(); return;
    case DType::kIQ4_XS: f.template operator()<MmqIq4Xs>(); return;
    case DType::kQ6_K: f.template operator()<MmqQ6K>(); return;
    case DType::kQ3_K: f.template operator()<MmqQ3K>(); return;
    case DType::kQ2_K: f.template operator()<MmqQ2K>(); return;
    default:
      with_q8_layout(type, layout, [&]<bool Q8, bool Split>() { f.template operator()<MmqLegacy<Q8, Split>>(); });
  }
}

}  // namespace sluice::cuda
