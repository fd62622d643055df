// Quantized block layouts, byte-compatible with the blocks ggml writes into GGUF
// files (ggml-common.h: block_q8_0, block_q4_0, block_q4_K, block_q6_K; the
// further formats Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS are in
// quant/blocks_more.h).
//
// These are plain packed structs read straight out of mmapped weights; they own
// nothing. All multi-byte fields are little-endian (as in GGUF) and f16 fields are
// stored as raw IEEE half bits (see base/half.h). A row of a block type is simply
// n / block_size consecutive blocks with no padding between them.
#pragma once

#include <cstdint>
#include <cstring>

namespace sluice {

constexpr int kQK8_0 = 32;   // elements per Q8_0 block
constexpr int kQK4_0 = 32;   // elements per Q4_0 block
constexpr int kQK_K = 256;   // elements per K-quant super-block
constexpr int kKScaleBytes = 12;  // Q4_K packed 6-bit scales + mins

#pragma pack(push, 1)

// Q8_0: 32 elements, value[i] = d * qs[i].
//
//   byte 0      2                                  34
//        +------+----------------------------------+
//        | d    | qs[0] qs[1] ... qs[31]  (int8)   |
//        | f16  |                                  |
//        +------+----------------------------------+
struct BlockQ8_0 {
  uint16_t d;          // f16 scale
  int8_t qs[kQK8_0];   // [32] quants, element i = qs[i]
};

// Q4_0: 32 elements, value[i] = (q[i] - 8) * d, q in [0, 15].
//
//   byte 0      2                                  18
//        +------+----------------------------------+
//        | d    | qs[0] .. qs[15]                  |
//        | f16  |                                  |
//        +------+----------------------------------+
//   qs[j] = q[j] | q[j + 16] << 4      (j in 0..15)
//           ^ low nibble: elements 0..15, high nibble: elements 16..31
struct BlockQ4_0 {
  uint16_t d;               // f16 scale
  uint8_t qs[kQK4_0 / 2];   // [16] two 4-bit quants per byte, see diagram
};

// Q4_K: super-block of 256 = 8 sub-blocks of 32 elements ("type-1": scale and min).
// value = d * sc[s] * q - dmin * m[s], q in [0, 15], sc/m 6-bit in [0, 63],
// where s = element / 32 is the sub-block.
//
//   byte 0      2      4                 16                                 144
//        +------+------+-----------------+----------------------------------+
//        | d    | dmin | scales[12]      | qs[128]                          |
//        | f16  | f16  | 8x(6-bit sc,m)  | 4-bit quants                     |
//        +------+------+-----------------+----------------------------------+
//
// scales[12] packs sc[0..7] and m[0..7] (bit 7 is the MSB):
//
//   byte   bits 7..6   bits 5..0          byte   bits 7..4    bits 3..0
//   0..3   sc[4..7]>>4  sc[0..3]           8..11  m[4..7]&15   sc[4..7]&15
//   4..7   m[4..7]>>4   m[0..3]
//
//   i.e. for s < 4:  sc[s] = scales[s] & 63,        m[s] = scales[s + 4] & 63
//        for s >= 4: sc[s] = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
//                    m[s]  = (scales[s + 4] >> 4) | (scales[s]     >> 6) << 4
//
// qs[128] holds 4 chunks of 32 bytes; chunk c covers elements 64c .. 64c+63:
//
//   qs[32c + l] = q[64c + l] | q[64c + 32 + l] << 4     (l in 0..31)
//                 ^ low nibble: sub-block 2c,  high nibble: sub-block 2c+1
struct BlockQ4_K {
  uint16_t d;                    // f16 super-block scale of the 6-bit scales
  uint16_t dmin;                 // f16 super-block scale of the 6-bit mins
  uint8_t scales[kKScaleBytes];  // [12] packed 6-bit scales and mins, see diagram
  uint8_t qs[kQK_K / 2];         // [128] 4-bit quants, see diagram
};

// Q6_K: super-block of 256 = 16 sub-blocks of 16 elements ("type-0": scale only).
// value = d * scales[s] * (q - 32), q in [0, 63], s = element / 16.
//
//   byte 0                 128             192           208    210
//        +-----------------+---------------+-------------+------+
//        | ql[128]         | qh[64]        | scales[16]  | d    |
//        | low 4 bits of q | high 2 bits   | int8        | f16  |
//        +-----------------+---------------+-------------+------+
//
// The block is two halves h = 0, 1 of 128 elements (ql[64h ..], qh[32h ..]);
// within a half, for l in 0..31 and e0 = 128h + l:
//
//   element   low 4 bits               high 2 bits
//   e0        ql[64h + l]      & 15    qh[32h + l]      & 3
//   e0 + 32   ql[64h + l + 32] & 15    qh[32h + l] >> 2 & 3
//   e0 + 64   ql[64h + l]      >> 4    qh[32h + l] >> 4 & 3
//   e0 + 96   ql[64h + l + 32] >> 4    qh[32h + l] >> 6 & 3
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];     // [128] low 4 bits of the quants, see diagram
  uint8_t qh[kQK_K / 4];     // [64] high 2 bits of the quants, see diagram
  int8_t scales[kQK_K / 16]; // [16] per-sub-block scales
  uint16_t d;                // f16 super-block scale
};

#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34, "BlockQ8_0 must be 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "BlockQ4_0 must be 18 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "BlockQ4_K must be 144 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "BlockQ6_K must be 210 bytes");

// Unpacks the 6-bit scale and min of Q4_K sub-block s (0..7) from scales[12].
inline void q4_k_scale_min(const uint8_t* scales, int s, uint8_t* sc, uint8_t* m) {
  if (s < 4) {
    *sc = scales[s] & 63;
    *m = scales[s + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[s + 4] & 15) | ((scales[s - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
  }
}

// All 8 scales and mins of q4_k_scale_min() at once: byte s of *sc (*m) is
// sub-block s's scale (min). Word operations, for the SIMD kernels.
inline void q4_k_scales_mins(const uint8_t* scales, uint64_t* sc, uint64_t* m) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
  *sc = sc_lo | static_cast<uint64_t>(sc_hi) << 32;
  *m = m_lo | static_cast<uint64_t>(m_hi) << 32;
}

// Packs 6-bit scales sc[8] and mins m[8] (each 0..63) into scales[12].
inline void q4_k_pack_scales(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
    scales[s + 4] = static_cast<uint8_t>((m[s] & 63) | ((m[s + 4] >> 4) << 6));
    scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | ((m[s + 4] & 15) << 4));
  }
}

// The 6-bit quant (0..63) of element e (0..255) of a Q6_K block.
inline int q6_k_quant(const BlockQ6_K& b, int e) {
  const int h = e / 128;        // half
  const int r = e % 128;
  const int quarter = r / 32;   // 0..3: which of the four 32-element groups
  const int l = r % 32;
  const uint8_t low_byte = b.ql[64 * h + l + (quarter & 1) * 32];
  const int low = (quarter < 2) ? (low_byte & 15) : (low_byte >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
  return low | (high << 4);
}

// The 4-bit quant (0..15) of element e (0..255) of a Q4_K block.
inline int q4_k_quant(const BlockQ4_K& b, int e) {
  const int chunk = e / 64;
  const int r = e % 64;
  const uint8_t byte = b.qs[32 * chunk + r % 32];
  return (r < 32) ? (byte & 15) : (byte >> 4);
}

// The typed reference rows behind the traits table (quant/dtype.cpp), defined
// in quant/quant_<type>.cpp: pure functions, thread-safe, no allocation; n is a
// multiple of the block size. dequantize: blocks [n / block size] -> dst [n];
// quantize: src [n] -> blocks. A row's dot dequantizes it block by block
// (dot_row(), quant/quant.h).

void dequantize_row_q8_0(const BlockQ8_0* blocks, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, BlockQ8_0* blocks, int64_t n);

void dequantize_row_q4_0(const BlockQ4_0* blocks, float* dst, int64_t n);
void quantize_row_q4_0(const float* src, BlockQ4_0* blocks, int64_t n);

void dequantize_row_q4_k(const BlockQ4_K* blocks, float* dst, int64_t n);
void quantize_row_q4_k(const float* src, BlockQ4_K* blocks, int64_t n);

void dequantize_row_q6_k(const BlockQ6_K* blocks, float* dst, int64_t n);
void quantize_row_q6_k(const float* src, BlockQ6_K* blocks, int64_t n);

}  // namespace sluice
