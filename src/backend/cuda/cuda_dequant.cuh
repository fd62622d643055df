// Per-type weight decoders for the CUDA matmul (cuda_matmul.cu). Each one cuts
// a GGUF block (quant/blocks.h, quant/blocks_more.h) into kLanes pieces of 8
// elements; lane c of a block loads its piece (load) and turns it into 8 floats
// (decode), computed exactly as dequantize_row computes them. The 8 weights go
// with two runs of 4 consecutive x values, at x_off(c, 0) and x_off(c, 1)
// within the block:
//
//   w[0..3] * x[block + x_off(c, 0) + 0..3]   w[4..7] * x[block + x_off(c, 1) + 0..3]
//
// Nibble-packed blocks (qs[j] = q[j] | q[j + 16] << 4) give a lane 4 bytes of
// qs: elements 4c..4c+3 (low nibbles) and 16+4c..16+4c+3 (high nibbles).
//
// Loads: a block whose size is a multiple of 4 bytes is read with 4-byte loads
// (every block start is 4-aligned); the others (18, 22, 34, 110, 210 bytes) are
// only 2-aligned and read as pairs of 2-byte loads. Lanes of one block are
// adjacent and blocks follow each other, so a warp reads one contiguous span.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_loads.cuh"
#include "quant/blocks_more.h"
#include "quant/dtype.h"

namespace sluice::cuda {

// 16 bytes read once: not kept in L1, which is left to x.
__device__ __forceinline__ uint4 ld128_stream(const uint8_t* p) {
#ifdef SLUICE_CUDA_EMU  // the CPU emulator (tests/cuda_emu): a plain load
  return *reinterpret_cast<const uint4*>(p);
#else
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
#endif
}

__device__ __forceinline__ float nib(uint32_t q, int k) { return static_cast<float>((q >> (8 * k)) & 15); }


// ---- float types: a "block" is 8 consecutive elements, one lane each ----

struct DecF32 {
  static constexpr int kElems = 8, kBytes = 32, kLanes = 1;
  struct Raw { uint4 a, b; };
  __device__ static Raw load(const uint8_t* p, int) { return {ld128_stream(p), ld128_stream(p + 16)}; }
  __device__ static void decode(const Raw& r, int, float* w) {
    const uint32_t u[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = __uint_as_float(u[k]);
  }
  __device__ static int x_off(int, int v) { return 4 * v; }
};

// F16 and BF16: 8 16-bit values, element 2k in the low half of word k.
template <bool kBF16>
struct Dec16 {
  static constexpr int kElems = 8, kBytes = 16, kLanes = 1;
  struct Raw { uint4 a; };
  __device__ static Raw load(const uint8_t* p, int) { return {ld128_stream(p)}; }
  __device__ static float half(uint32_t bits) { return kBF16 ? __uint_as_float(bits << 16) : f16(bits); }
  __device__ static void decode(const Raw& r, int, float* w) {
    const uint32_t u[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[2 * k] = half(u[k] & 0xffffu);
      w[2 * k + 1] = half(u[k] >> 16);
    }
  }
  __device__ static int x_off(int, int v) { return 4 * v; }
};
using DecF16 = Dec16<false>;
using DecBF16 = Dec16<true>;

// ---- 32-element blocks: 4 lanes each ----

struct DecQ8_0 {  // 34 bytes; lane c: qs[8c .. 8c+7] = elements 8c .. 8c+7
  static constexpr int kElems = 32, kBytes = sizeof(BlockQ8_0), kLanes = 4;
  struct Raw { uint32_t d, lo, hi; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const uint8_t* q = p + offsetof(BlockQ8_0, qs) + 8 * c;
    return {ld16(p), ld32_a2(q), ld32_a2(q + 4)};
  }
  __device__ static void decode(const Raw& r, int, float* w) {
    const float d = f16(r.d);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = s8(r.lo, k) * d;
      w[4 + k] = s8(r.hi, k) * d;
    }
  }
  __device__ static int x_off(int c, int v) { return 8 * c + 4 * v; }
};

struct DecQ4_0 {  // 18 bytes: (q - 8) * d
  static constexpr int kElems = 32, kBytes = sizeof(BlockQ4_0), kLanes = 4;
  struct Raw { uint32_t d, q; };
  __device__ static Raw load(const uint8_t* p, int c) { return {ld16(p), ld32_a2(p + offsetof(BlockQ4_0, qs) + 4 * c)}; }
  __device__ static void decode(const Raw& r, int, float* w) {
    const float d = f16(r.d);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = (nib(r.q, k) - 8.0f) * d;
      w[4 + k] = (nib(r.q >> 4, k) - 8.0f) * d;
    }
  }
  __device__ static int x_off(int c, int v) { return 4 * c + 16 * v; }
};

struct DecQ4_1 {  // 20 bytes: q * d + m
  static constexpr int kElems = 32, kBytes = sizeof(BlockQ4_1), kLanes = 4;
  struct Raw { uint32_t dm, q; };
  __device__ static Raw load(const uint8_t* p, int c) { return {ld32(p), ld32(p + offsetof(BlockQ4_1, qs) + 4 * c)}; }
  __device__ static void decode(const Raw& r, int, float* w) {
    const float d = f16(r.dm & 0xffffu), m = f16(r.dm >> 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = nib(r.q, k) * d + m;
      w[4 + k] = nib(r.q >> 4, k) * d + m;
    }
  }
  __device__ static int x_off(int c, int v) { return 4 * c + 16 * v; }
};

// Bit 4 of element i of a Q5 block: bit i of qh.
__device__ __forceinline__ float q5(uint32_t q, uint32_t qh, int k, int i) {
  return static_cast<float>(((q >> (8 * k)) & 15) | (((qh >> i) & 1) << 4));
}

struct DecQ5_0 {  // 22 bytes: (q - 16) * d
  static constexpr int kElems = 32, kBytes = sizeof(BlockQ5_0), kLanes = 4;
  struct Raw { uint32_t d, qh, q; };
  __device__ static Raw load(const uint8_t* p, int c) {
    return {ld16(p), ld32_a2(p + offsetof(BlockQ5_0, qh)), ld32_a2(p + offsetof(BlockQ5_0, qs) + 4 * c)};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const float d = f16(r.d);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = (q5(r.q, r.qh, k, 4 * c + k) - 16.0f) * d;
      w[4 + k] = (q5(r.q >> 4, r.qh, k, 16 + 4 * c + k) - 16.0f) * d;
    }
  }
  __device__ static int x_off(int c, int v) { return 4 * c + 16 * v; }
};

struct DecQ5_1 {  // 24 bytes: q * d + m
  static constexpr int kElems = 32, kBytes = sizeof(BlockQ5_1), kLanes = 4;
  struct Raw { uint32_t dm, qh, q; };
  __device__ static Raw load(const uint8_t* p, int c) {
    return {ld32(p), ld32(p + offsetof(BlockQ5_1, qh)), ld32(p + offsetof(BlockQ5_1, qs) + 4 * c)};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const float d = f16(r.dm & 0xffffu), m = f16(r.dm >> 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = q5(r.q, r.qh, k, 4 * c + k) * d + m;
      w[4 + k] = q5(r.q >> 4, r.qh, k, 16 + 4 * c + k) * d + m;
    }
  }
  __device__ static int x_off(int c, int v) { return 4 * c + 16 * v; }
};

struct DecIq4Nl {  // 18 bytes: d * kIq4NlValues[q]
  static constexpr int kElems = 32, kBytes = sizeof(BlockIq4Nl), kLanes = 4;
  struct Raw { uint32_t d, q; };
  __device__ static Raw load(const uint8_t* p, int c) { return {ld16(p), ld32_a2(p + offsetof(BlockIq4Nl, qs) + 4 * c)}; }
  __device__ static void decode(const Raw& r, int, float* w) {
    const float d = f16(r.d);
    const uint32_t lo = iq4_lookup4(r.q & 0x0f0f0f0fu), hi = iq4_lookup4((r.q >> 4) & 0x0f0f0f0fu);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = d * s8(lo, k);
      w[4 + k] = d * s8(hi, k);
    }
  }
  __device__ static int x_off(int c, int v) { return 4 * c + 16 * v; }
};

// ---- 256-element super-blocks: 32 lanes each ----

struct DecIq4Xs {  // 136 bytes; lane c: sub-block s = c / 4, its qs[4 (c % 4) ..] as in IQ4_NL
  static constexpr int kElems = 256, kBytes = sizeof(BlockIq4Xs), kLanes = 32;
  struct Raw { uint32_t dh, sl, q; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const int s = c / 4;
    return {ld32(p), ld8(p + offsetof(BlockIq4Xs, scales_l) + s / 2), ld32(p + offsetof(BlockIq4Xs, qs) + 16 * s + 4 * (c % 4))};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const int s = c / 4;
    const int ls = ((r.sl >> (4 * (s % 2))) & 15) | (((r.dh >> (16 + 2 * s)) & 3) << 4);
    const float dl = f16(r.dh & 0xffffu) * static_cast<float>(ls - 32);
    const uint32_t lo = iq4_lookup4(r.q & 0x0f0f0f0fu), hi = iq4_lookup4((r.q >> 4) & 0x0f0f0f0fu);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = dl * s8(lo, k);
      w[4 + k] = dl * s8(hi, k);
    }
  }
  __device__ static int x_off(int c, int v) { return 32 * (c / 4) + 4 * (c % 4) + 16 * v; }
};

// Q4_K / Q5_K: lane c covers chunk g = c / 8 (elements 64g ..), l0 = 4 (c % 8):
// elements 64g + l0 + 0..3 (sub-block 2g, low nibbles of qs[32g + l0 ..]) and
// 64g + 32 + l0 + 0..3 (sub-block 2g + 1, high nibbles).
struct KScales {
  float scale[2], min[2];  // d * sc, dmin * m of sub-blocks 2g, 2g + 1
};
__device__ __forceinline__ KScales k_scales(uint32_t dm, uint32_t w0, uint32_t w1, uint32_t w2, int g) {
  const float d = f16(dm & 0xffffu), dmin = f16(dm >> 16);
  KScales r;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint2 sm = k_scale_min(w0, w1, w2, 2 * g + j);
    r.scale[j] = d * static_cast<float>(sm.x);
    r.min[j] = dmin * static_cast<float>(sm.y);
  }
  return r;
}

struct DecQ4_K {  // 144 bytes: (d * sc) * q - (dmin * m)
  static constexpr int kElems = 256, kBytes = sizeof(BlockQ4_K), kLanes = 32;
  struct Raw { uint32_t dm, s0, s1, s2, q; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const uint8_t* sc = p + offsetof(BlockQ4_K, scales);
    return {ld32(p), ld32(sc), ld32(sc + 4), ld32(sc + 8), ld32(p + offsetof(BlockQ4_K, qs) + 32 * (c / 8) + 4 * (c % 8))};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const KScales k = k_scales(r.dm, r.s0, r.s1, r.s2, c / 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = k.scale[0] * nib(r.q, i) - k.min[0];
      w[4 + i] = k.scale[1] * nib(r.q >> 4, i) - k.min[1];
    }
  }
  __device__ static int x_off(int c, int v) { return 64 * (c / 8) + 4 * (c % 8) + 32 * v; }
};

struct DecQ5_K {  // 176 bytes: as Q4_K, fifth bit of element 64g + 32v + l at bit 2g + v of qh[l]
  static constexpr int kElems = 256, kBytes = sizeof(BlockQ5_K), kLanes = 32;
  struct Raw { uint32_t dm, s0, s1, s2, qh, q; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const uint8_t* sc = p + offsetof(BlockQ5_K, scales);
    const int l0 = 4 * (c % 8);
    return {ld32(p), ld32(sc), ld32(sc + 4), ld32(sc + 8), ld32(p + offsetof(BlockQ5_K, qh) + l0),
            ld32(p + offsetof(BlockQ5_K, qs) + 32 * (c / 8) + l0)};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const int g = c / 8;
    const KScales k = k_scales(r.dm, r.s0, r.s1, r.s2, g);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q_lo = ((r.q >> (8 * i)) & 15) | (((r.qh >> (8 * i + 2 * g)) & 1) << 4);
      const uint32_t q_hi = ((r.q >> (8 * i + 4)) & 15) | (((r.qh >> (8 * i + 2 * g + 1)) & 1) << 4);
      w[i] = k.scale[0] * static_cast<float>(q_lo) - k.min[0];
      w[4 + i] = k.scale[1] * static_cast<float>(q_hi) - k.min[1];
    }
  }
  __device__ static int x_off(int c, int v) { return 64 * (c / 8) + 4 * (c % 8) + 32 * v; }
};

// Q6_K / Q3_K / Q2_K: half h = c / 16 (elements 128h ..), pair p = (c / 8) % 2,
// l0 = 4 (c % 8). See each for which 32-element quarters the pair covers.
struct DecQ6_K {  // 210 bytes: (d * sc) * (q - 32); quarters p and p + 2 of half h
  static constexpr int kElems = 256, kBytes = sizeof(BlockQ6_K), kLanes = 32;
  struct Raw { uint32_t ql, qh, sc0, sc1, d; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const int h = c / 16, pr = (c / 8) % 2, l0 = 4 * (c % 8);
    const int s0 = 8 * h + 2 * pr + l0 / 16;  // sub-block (16 elements) of quarter p; quarter p + 2 is s0 + 4
    const uint8_t* sc = p + offsetof(BlockQ6_K, scales);
    return {ld32_a2(p + offsetof(BlockQ6_K, ql) + 64 * h + 32 * pr + l0), ld32_a2(p + offsetof(BlockQ6_K, qh) + 32 * h + l0),
            ld8(sc + s0), ld8(sc + s0 + 4), ld16(p + offsetof(BlockQ6_K, d))};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const int pr = (c / 8) % 2;
    const float d = f16(r.d);
    const float scale0 = d * s8(r.sc0, 0), scale1 = d * s8(r.sc1, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q_lo = static_cast<int>(((r.ql >> (8 * i)) & 15) | (((r.qh >> (8 * i + 2 * pr)) & 3) << 4));
      const int q_hi = static_cast<int>(((r.ql >> (8 * i + 4)) & 15) | (((r.qh >> (8 * i + 2 * pr + 4)) & 3) << 4));
      w[i] = scale0 * static_cast<float>(q_lo - 32);
      w[4 + i] = scale1 * static_cast<float>(q_hi - 32);
    }
  }
  __device__ static int x_off(int c, int v) { return 128 * (c / 16) + 32 * ((c / 8) % 2) + 4 * (c % 8) + 64 * v; }
};

struct DecQ2_K {  // 84 bytes: (d * (sc & 15)) * q - dmin * (sc >> 4); quarters 2p and 2p + 1 of half h
  static constexpr int kElems = 256, kBytes = sizeof(BlockQ2_K), kLanes = 32;
  struct Raw { uint32_t q, sc0, sc1, dm; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const int h = c / 16, pr = (c / 8) % 2, l0 = 4 * (c % 8);
    const int s0 = 8 * h + 4 * pr + l0 / 16;  // sub-block of quarter 2p; quarter 2p + 1 is s0 + 2
    return {ld32(p + offsetof(BlockQ2_K, qs) + 32 * h + l0), ld8(p + offsetof(BlockQ2_K, scales) + s0),
            ld8(p + offsetof(BlockQ2_K, scales) + s0 + 2), ld32(p + offsetof(BlockQ2_K, d))};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const int j = 2 * ((c / 8) % 2);
    const float d = f16(r.dm & 0xffffu), dmin = f16(r.dm >> 16);
    const float dl0 = d * static_cast<float>(r.sc0 & 15), ml0 = dmin * static_cast<float>(r.sc0 >> 4);
    const float dl1 = d * static_cast<float>(r.sc1 & 15), ml1 = dmin * static_cast<float>(r.sc1 >> 4);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = dl0 * static_cast<float>((r.q >> (8 * i + 2 * j)) & 3) - ml0;
      w[4 + i] = dl1 * static_cast<float>((r.q >> (8 * i + 2 * j + 2)) & 3) - ml1;
    }
  }
  __device__ static int x_off(int c, int v) { return 128 * (c / 16) + 64 * ((c / 8) % 2) + 4 * (c % 8) + 32 * v; }
};

struct DecQ3_K {  // 110 bytes: (d * (sc - 32)) * (q - 4); quarters 2p and 2p + 1 of half h
  static constexpr int kElems = 256, kBytes = sizeof(BlockQ3_K), kLanes = 32;
  struct Raw { uint32_t q, hm, lo0, hi0, lo1, hi1, d; };
  __device__ static Raw load(const uint8_t* p, int c) {
    const int h = c / 16, pr = (c / 8) % 2, l0 = 4 * (c % 8);
    const int s0 = 8 * h + 4 * pr + l0 / 16, s1 = s0 + 2;
    const uint8_t* sc = p + offsetof(BlockQ3_K, scales);  // q3_k_scale (quant/blocks_more.h)
    return {ld32_a2(p + offsetof(BlockQ3_K, qs) + 32 * h + l0), ld32_a2(p + offsetof(BlockQ3_K, hmask) + l0),
            ld8(sc + (s0 & 7)), ld8(sc + 8 + (s0 & 3)), ld8(sc + (s1 & 7)), ld8(sc + 8 + (s1 & 3)),
            ld16(p + offsetof(BlockQ3_K, d))};
  }
  __device__ static void decode(const Raw& r, int c, float* w) {
    const int h = c / 16, j = 2 * ((c / 8) % 2);
    const int s0 = 8 * h + 2 * j + 4 * (c % 8) / 16, s1 = s0 + 2;
    const int sc0 = static_cast<int>(((s0 < 8 ? r.lo0 : r.lo0 >> 4) & 15) | (((r.hi0 >> (2 * (s0 / 4))) & 3) << 4));
    const int sc1 = static_cast<int>(((s1 < 8 ? r.lo1 : r.lo1 >> 4) & 15) | (((r.hi1 >> (2 * (s1 / 4))) & 3) << 4));
    const float d = f16(r.d);
    const float dl0 = d * static_cast<float>(sc0 - 32), dl1 = d * static_cast<float>(sc1 - 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int q0 = static_cast<int>(((r.q >> (8 * i + 2 * j)) & 3) | (((r.hm >> (8 * i + 4 * h + j)) & 1) << 2));
      const int q1 = static_cast<int>(((r.q >> (8 * i + 2 * j + 2)) & 3) | (((r.hm >> (8 * i + 4 * h + j + 1)) & 1) << 2));
      w[i] = dl0 * static_cast<float>(q0 - 4);
      w[4 + i] = dl1 * static_cast<float>(q1 - 4);
    }
  }
  __device__ static int x_off(int c, int v) { return 128 * (c / 16) + 64 * ((c / 8) % 2) + 4 * (c % 8) + 32 * v; }
};

// ---- the types with a decoder ----

// Calls f.template operator()<D>() with the decoder D of `type` and returns
// true; false, f not called, for a type without one. The one list of the
// types the CUDA kernels decode: the matmul, the bf16 tiles of prefill and
// training's f32 rows all dispatch through it.
template <class F>
bool with_decoder(DType type, F&& f) {
  switch (type) {
    case DType::kF32: f.template operator()<DecF32>(); return true;
    case DType::kF16: f.template operator()<DecF16>(); return true;
    case DType::kBF16: f.template operator()<DecBF16>(); return true;
    case DType::kQ8_0: f.template operator()<DecQ8_0>(); return true;
    case DType::kQ4_0: f.template operator()<DecQ4_0>(); return true;
    case DType::kQ4_1: f.template operator()<DecQ4_1>(); return true;
    case DType::kQ5_0: f.template operator()<DecQ5_0>(); return true;
    case DType::kQ5_1: f.template operator()<DecQ5_1>(); return true;
    case DType::kQ2_K: f.template operator()<DecQ2_K>(); return true;
    case DType::kQ3_K: f.template operator()<DecQ3_K>(); return true;
    case DType::kQ4_K: f.template operator()<DecQ4_K>(); return true;
    case DType::kQ5_K: f.template operator()<DecQ5_K>(); return true;
    case DType::kQ6_K: f.template operator()<DecQ6_K>(); return true;
    case DType::kIQ4_NL: f.template operator()<DecIq4Nl>(); return true;
    case DType::kIQ4_XS: f.template operator()<DecIq4Xs>(); return true;
    default: return false;
  }
}

// Elements a block of a quantized or 16-bit type holds (its decoder's
// kElems), 0 for F32 and the types without a decoder: what the weight-to-
// tile conversions (bf16 for prefill, f32 for training) take.
inline int converted_block_elems(DType type) {
  int elems = 0;
  if (type != DType::kF32) with_decoder(type, [&]<class D>() { elems = D::kElems; });
  return elems;
}

}  // namespace sluice::cuda
