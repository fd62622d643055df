// More quantized block layouts, byte-compatible with ggml's (ggml-common.h:
// block_q4_1, block_q5_0, block_q5_1, block_q2_K, block_q3_K, block_q5_K,
// block_iq4_nl, block_iq4_xs). Plain packed structs read straight out of mmapped
// weights, as in quant/blocks.h (little-endian fields, f16 as raw half bits).
// The element accessors below are the one place that decodes each bit layout;
// the reference quantizers write the inverse of them.
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"

namespace sluice {

constexpr int kQK4_1 = 32;   // elements per Q4_1 block
constexpr int kQK5_0 = 32;   // elements per Q5_0 block
constexpr int kQK5_1 = 32;   // elements per Q5_1 block
constexpr int kQK4_NL = 32;  // elements per IQ4_NL block

// The 16 values a 4-bit index of IQ4_NL / IQ4_XS selects (ggml kvalues_iq4nl):
// a non-linear grid, denser near zero, where most weights lie.
constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

#pragma pack(push, 1)

// Q4_1: 32 elements, value[i] = d * q[i] + m, q in [0, 15].
//
//   byte 0      2      4                           20
//        +------+------+---------------------------+
//        | d    | m    | qs[16]: q[j] | q[j+16]<<4 |
//        | f16  | f16  |                           |
//        +------+------+---------------------------+
struct BlockQ4_1 {
  uint16_t d;               // f16 scale
  uint16_t m;               // f16 offset (added)
  uint8_t qs[kQK4_1 / 2];   // [16] nibbles as in Q4_0
};

// Q5_0: 32 elements, value[i] = d * (q[i] - 16), q in [0, 31].
//
//   byte 0      2          6                           22
//        +------+----------+---------------------------+
//        | d    | qh[4]    | qs[16]: low 4 bits of q   |
//        | f16  | bit i =  | q[j] | q[j+16] << 4       |
//        |      | bit 4 of q[i] (qh read as LE uint32) |
//        +------+----------+---------------------------+
struct BlockQ5_0 {
  uint16_t d;               // f16 scale
  uint8_t qh[4];            // [4] 32 high bits, element i = bit i of the LE uint32
  uint8_t qs[kQK5_0 / 2];   // [16] low nibbles as in Q4_0
};

// Q5_1: 32 elements, value[i] = d * q[i] + m, q in [0, 31]; bits as in Q5_0.
//
//   byte 0      2      4          8                    24
//        +------+------+----------+--------------------+
//        | d    | m    | qh[4]    | qs[16]             |
//        +------+------+----------+--------------------+
struct BlockQ5_1 {
  uint16_t d;               // f16 scale
  uint16_t m;               // f16 offset (added)
  uint8_t qh[4];            // [4] high bits as in Q5_0
  uint8_t qs[kQK5_1 / 2];   // [16] low nibbles as in Q4_0
};

// Q2_K: super-block of 256 = 16 sub-blocks of 16 ("type-1").
// value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in [0, 3],
// s = element / 16.
//
//   byte 0            16                        80     82     84
//        +-------------+-------------------------+------+------+
//        | scales[16]  | qs[64]                  | d    | dmin |
//        | lo: sc hi: m| 2-bit quants            | f16  | f16  |
//        +-------------+-------------------------+------+------+
//
// Element e = 128h + 32j + l (h in 0..1, j in 0..3, l in 0..31) is bits
// 2j..2j+1 of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // [16] 4-bit scale (low) and 4-bit min (high)
  uint8_t qs[kQK_K / 4];       // [64] 2-bit quants, see diagram
  uint16_t d;                  // f16 super-block scale of the scales
  uint16_t dmin;               // f16 super-block scale of the mins
};

// Q3_K: super-block of 256 = 16 sub-blocks of 16 ("type-0").
// value = d * (sc[s] - 32) * (q - 4), q in [0, 7], sc 6-bit in [0, 63], s = e / 16.
//
//   byte 0            32                96               108    110
//        +-------------+-----------------+----------------+------+
//        | hmask[32]   | qs[64]          | scales[12]     | d    |
//        | bit 2 of q  | bits 0..1 of q  | 16 x 6-bit     | f16  |
//        +-------------+-----------------+----------------+------+
//
// Element e = 128h + 32j + l: bits 0..1 are bits 2j..2j+1 of qs[32h + l];
// bit 2 is bit (4h + j) of hmask[l].
// scales[12]: sc[s] bits 0..3 = scales[s] & 15 (s < 8), scales[s - 8] >> 4
// (s >= 8); bits 4..5 = (scales[8 + s % 4] >> (2 * (s / 4))) & 3.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];      // [32] high bit of the quants
  uint8_t qs[kQK_K / 4];         // [64] low 2 bits of the quants
  uint8_t scales[kKScaleBytes];  // [12] 16 packed 6-bit scales
  uint16_t d;                    // f16 super-block scale
};

// Q5_K: as Q4_K plus a fifth bit per element; q in [0, 31].
// value = d * sc[s] * q - dmin * m[s], s = element / 32; scales as in Q4_K.
//
//   byte 0      2      4            16          48                       176
//        +------+------+------------+-----------+------------------------+
//        | d    | dmin | scales[12] | qh[32]    | qs[128] low 4 bits     |
//        +------+------+------------+-----------+------------------------+
//
// Element 64c + l (l < 32): low nibble of qs[32c + l], high bit = bit 2c of qh[l];
// element 64c + 32 + l: high nibble of qs[32c + l], high bit = bit 2c + 1 of qh[l].
struct BlockQ5_K {
  uint16_t d;                    // f16 super-block scale of the 6-bit scales
  uint16_t dmin;                 // f16 super-block scale of the 6-bit mins
  uint8_t scales[kKScaleBytes];  // [12] packed as in Q4_K
  uint8_t qh[kQK_K / 8];         // [32] fifth bits, see diagram
  uint8_t qs[kQK_K / 2];         // [128] low 4 bits as in Q4_K
};

// IQ4_NL: 32 elements, value[i] = d * kIq4NlValues[q[i]]; nibbles as in Q4_0.
//
//   byte 0      2                           18
//        +------+---------------------------+
//        | d    | qs[16]: q[j] | q[j+16]<<4 |
//        +------+---------------------------+
struct BlockIq4Nl {
  uint16_t d;                // f16 scale
  uint8_t qs[kQK4_NL / 2];   // [16] indices into kIq4NlValues
};

// IQ4_XS: super-block of 256 = 8 sub-blocks of 32, each with a 6-bit scale.
// value = d * (ls[s] - 32) * kIq4NlValues[q], s = element / 32.
//
//   byte 0      2           4             8                          136
//        +------+-----------+-------------+--------------------------+
//        | d    | scales_h  | scales_l[4] | qs[128]                  |
//        | f16  | u16: 2 hi | 4 lo bits   | sub-block s: qs[16s..]   |
//        |      | bits x 8  | x 8         | nibbles as in Q4_0       |
//        +------+-----------+-------------+--------------------------+
//   ls[s] = (scales_l[s / 2] >> (4 * (s % 2)) & 15) | ((scales_h >> 2s) & 3) << 4
struct BlockIq4Xs {
  uint16_t d;                    // f16 super-block scale
  uint16_t scales_h;             // high 2 bits of the 8 sub-block scales
  uint8_t scales_l[kQK_K / 64];  // [4] low 4 bits of the 8 sub-block scales
  uint8_t qs[kQK_K / 2];         // [128] indices into kIq4NlValues
};

#pragma pack(pop)

static_assert(sizeof(BlockQ4_1) == 20, "BlockQ4_1 must be 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "BlockQ5_0 must be 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "BlockQ5_1 must be 24 bytes");
static_assert(sizeof(BlockQ2_K) == 84, "BlockQ2_K must be 84 bytes");
static_assert(sizeof(BlockQ3_K) == 110, "BlockQ3_K must be 110 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "BlockQ5_K must be 176 bytes");
static_assert(sizeof(BlockIq4Nl) == 18, "BlockIq4Nl must be 18 bytes");
static_assert(sizeof(BlockIq4Xs) == 136, "BlockIq4Xs must be 136 bytes");

// The nibble of element i (0..31) of a 32-element block laid out as Q4_0.
inline int nibble32(const uint8_t* qs, int i) { return i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4); }

// Bit 4 of element i (0..31) of a Q5_0 / Q5_1 block: bit i of qh as a LE uint32.
inline int q5_high_bit(const uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

// The quant (0..3) and sub-block scale / min (0..15) of element e of a Q2_K block.
inline int q2_k_quant(const BlockQ2_K& b, int e) { return (b.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }

// The 3-bit quant (0..7, value q - 4) of element e of a Q3_K block.
inline int q3_k_quant(const BlockQ3_K& b, int e) {
  const int h = e / 128, j = e % 128 / 32, l = e % 32;
  const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
  const int high = (b.hmask[l] >> (4 * h + j)) & 1;
  return low | (high << 2);
}

// The 6-bit scale (0..63, value sc - 32) of sub-block s (0..15) of a Q3_K block.
inline int q3_k_scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 15) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

// q3_k_scale() of all 16 sub-blocks at once, with word operations: byte s of
// *lo (s < 8) or of *hi (s >= 8, byte s - 8) is the scale of sub-block s.
inline void q3_k_scales16(const uint8_t* scales, uint64_t* lo, uint64_t* hi) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t low4 = 0x0f0f0f0fu, high2 = 0x03030303u;
  const uint32_t a0 = (u[0] & low4) | ((u[2] & high2) << 4);           // scales 0..3
  const uint32_t a1 = (u[1] & low4) | (((u[2] >> 2) & high2) << 4);    // 4..7
  const uint32_t a2 = ((u[0] >> 4) & low4) | (((u[2] >> 4) & high2) << 4);  // 8..11
  const uint32_t a3 = ((u[1] >> 4) & low4) | (((u[2] >> 6) & high2) << 4);  // 12..15
  *lo = a0 | static_cast<uint64_t>(a1) << 32;
  *hi = a2 | static_cast<uint64_t>(a3) << 32;
}

// Packs 16 6-bit scales (0..63) into a Q3_K scales[12]; inverse of q3_k_scale.
inline void q3_k_pack_scales(const uint8_t* sc, uint8_t* scales) {
  std::memset(scales, 0, kKScaleBytes);
  for (int s = 0; s < 16; ++s) {
    scales[s % 8] |= static_cast<uint8_t>((sc[s] & 15) << (s < 8 ? 0 : 4));
    scales[8 + s % 4] |= static_cast<uint8_t>(((sc[s] >> 4) & 3) << (2 * (s / 4)));
  }
}

// The 5-bit quant (0..31) of element e of a Q5_K block.
inline int q5_k_quant(const BlockQ5_K& b, int e) {
  const int c = e / 64, r = e % 64, l = r % 32;
  const int low = r < 32 ? (b.qs[32 * c + l] & 15) : (b.qs[32 * c + l] >> 4);
  const int high = (b.qh[l] >> (2 * c + r / 32)) & 1;
  return low | (high << 4);
}

// The 6-bit scale (0..63, value ls - 32) of sub-block s (0..7) of an IQ4_XS block.
inline int iq4_xs_scale(const BlockIq4Xs& b, int s) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

// iq4_xs_scale() of all 8 sub-blocks at once: byte s is the scale of sub-block
// s. The low nibbles of scales_l interleaved with the high ones are the low 4
// bits in order; the 2-bit fields of scales_h are spread to one per byte.
inline uint64_t iq4_xs_scales8(const BlockIq4Xs& b) {
  uint32_t l;
  std::memcpy(&l, b.scales_l, 4);
  auto spread = [](uint64_t x) {  // byte k -> byte 2k (k < 4)
    x = (x | x << 16) & 0x0000FFFF0000FFFFULL;
    return (x | x << 8) & 0x00FF00FF00FF00FFULL;
  };
  const uint64_t low = spread(l & 0x0f0f0f0fu) | spread((l >> 4) & 0x0f0f0f0fu) << 8;
  const uint64_t h = b.scales_h;
  uint64_t t = (h & 0x000F) | ((h & 0x00F0) << 12) | ((h & 0x0F00) << 24) | ((h & 0xF000) << 36);
  t = (t & 0x0003000300030003ULL) | ((t & 0x000C000C000C000CULL) << 6);
  return low | t << 4;
}

// The typed reference rows behind the traits table (quant/dtype.cpp), defined
// in quant/quant_<type>.cpp, under the contract in quant/blocks.h.

// Q4_1, Q5_1: least-squares (scale, offset) search over candidate scales
// (search_scale_min on x - min(x), so the offset may have any sign); Q5_0:
// symmetric scale search (search_scale_symmetric, nmax 16); then the quants
// re-fitted to the f16 scales the block stores.
void dequantize_row_q4_1(const BlockQ4_1* blocks, float* dst, int64_t n);
void quantize_row_q4_1(const float* src, BlockQ4_1* blocks, int64_t n);
void dequantize_row_q5_0(const BlockQ5_0* blocks, float* dst, int64_t n);
void quantize_row_q5_0(const float* src, BlockQ5_0* blocks, int64_t n);
void dequantize_row_q5_1(const BlockQ5_1* blocks, float* dst, int64_t n);
void quantize_row_q5_1(const float* src, BlockQ5_1* blocks, int64_t n);

// Q2_K: per sub-block weighted (scale, min) search, then 4-bit scales and mins
// against f16 d / dmin, then quants re-fitted to those. Q3_K: per sub-block
// symmetric scale search (q - 4 in [-4, 3]), then 6-bit signed scales against
// an f16 d, then quants re-fitted.
void dequantize_row_q2_k(const BlockQ2_K* blocks, float* dst, int64_t n);
void quantize_row_q2_k(const float* src, BlockQ2_K* blocks, int64_t n);
void dequantize_row_q3_k(const BlockQ3_K* blocks, float* dst, int64_t n);
void quantize_row_q3_k(const float* src, BlockQ3_K* blocks, int64_t n);

// Q5_K: per sub-block weighted (scale, min) search, 6-bit scales and mins
// against f16 d / dmin, then quants re-fitted (as Q4_K).
void dequantize_row_q5_k(const BlockQ5_K* blocks, float* dst, int64_t n);
void quantize_row_q5_k(const float* src, BlockQ5_K* blocks, int64_t n);

// IQ4_NL, IQ4_XS: per group of 32, the scale minimizing the squared error over
// candidate scales (each value mapped to its nearest codebook entry, then a
// least-squares scale for that assignment); IQ4_XS then stores the group
// scales as 6-bit signed multiples of an f16 d. Indices are re-fitted to the
// stored scales.
void dequantize_row_iq4_nl(const BlockIq4Nl* blocks, float* dst, int64_t n);
void quantize_row_iq4_nl(const float* src, BlockIq4Nl* blocks, int64_t n);
void dequantize_row_iq4_xs(const BlockIq4Xs* blocks, float* dst, int64_t n);
void quantize_row_iq4_xs(const float* src, BlockIq4Xs* blocks, int64_t n);
// The index of the codebook entry nearest to v (ties to the lower index).
int iq4_nearest_index(float v);

}  // namespace sluice
