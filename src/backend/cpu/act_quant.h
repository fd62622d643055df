// Activation formats of the integer matmul kernels (quant_rows.h): one token's
// f32 activations quantized to int8 blocks, so a weight block times an activation
// block is an exact integer dot product and only the scales are floating point.
//
// Two formats, chosen by the weight type:
//
// ActQ8x64 -- for Q8_0 and Q4_0 weights (blocks of 32). A group holds two
// activation blocks (64 elements) laid out so a 512-bit kernel loads every field
// with one aligned load and no shuffle:
//
//   byte 0            64                        128                     192
//        +-------------+-------------------------+-----------------------+
//        | q[64] int8  | corr[16] int32          | d[16] f32             |
//        | block 0 | 1 | lane j: -off * sum of   | d0 x 8 | d1 x 8       |
//        |  (32)  (32) |   q[4j .. 4j+3]         | (block scales, f32)   |
//        +-------------+-------------------------+-----------------------+
//
//   x[i] ~= d_b * q[i] for element i of block b (b = i / 32), with
//   d_b = amax_b / 127 and q = round-to-nearest-even(x * (127 / amax_b)).
//   corr[j] is the weight-offset correction for the 4 bytes one int32 lane of a
//   byte dot product (vpdpbusd, maddubs+madd) covers: a kernel that multiplies
//   unsigned weights u = w + off by q starts its lane at corr[j], so the lane ends
//   at sum (u - off) * q exactly. off = 8 for Q4_0 (nibbles 0..15 hold w + 8) and
//   128 for Q8_0 (w ^ 0x80 = w + 128). Kernels that use signed weights ignore it.
//   A row of n_in elements is ceil(n_in / 64) groups; when n_in / 32 is odd the
//   last group's second block is all zero (q, corr and d).
//
// ActQ8x256 -- for Q4_K and Q6_K weights (super-blocks of 256):
//
//   byte 0                 256                 288      292          320
//        +------------------+-------------------+--------+------------+
//        | q[256] int8      | bsum[16] int16    | d f32  | zero pad   |
//        |                  | sum of q[16k..]   |        |            |
//        +------------------+-------------------+--------+------------+
//
//   x[i] ~= d * q[i], d = amax / 127 over the 256 elements; bsum[k] is the sum of
//   q[16k .. 16k+15], which the Q4_K min term (per 32: bsum[2s] + bsum[2s+1]) and
//   the Q6_K offset term (-32 per 16) need. A row is n_in / 256 blocks.
//
// Every instruction-set level writes byte-identical activations (same float ops:
// amax, 127 / amax, x * that, round to nearest even), so kernels at different
// levels differ only in how they accumulate floats. Functions are pure and
// thread-safe; dst must hold act_row_bytes_*(n_in) bytes and be 4-byte aligned
// (64-byte alignment makes every load of the 512-bit kernels aligned; rows()
// needs xa_stride to keep each token 4-byte aligned too).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::cpu {

constexpr int kActQ8x64Elems = 64;    // elements per ActQ8x64 group (two blocks of 32)
constexpr int kActQ8x256Elems = 256;  // elements per ActQ8x256 block

struct ActQ8x64 {
  int8_t q[64];     // [2 blocks][32]
  int32_t corr[16]; // [16 lanes] -off * (q[4j] + q[4j+1] + q[4j+2] + q[4j+3])
  float d[16];      // [2 blocks][8] the block scale, repeated 8 times
};

struct ActQ8x256 {
  int8_t q[256];     // [256]
  int16_t bsum[16];  // [16] sums of 16 consecutive q
  float d;           // scale
  uint8_t pad[28];   // zero
};

static_assert(sizeof(ActQ8x64) == 192, "ActQ8x64 must be 192 bytes");
static_assert(sizeof(ActQ8x256) == 320, "ActQ8x256 must be 320 bytes");

// Bytes of one token's activations of n_in elements (n_in a multiple of 32 / 256).
size_t act_row_bytes_q8x64(int64_t n_in);
size_t act_row_bytes_q8x256(int64_t n_in);

// x: [n_in] f32 -> dst: act_row_bytes_q8x64(n_in) bytes; off as described above.
void convert_act_q8x64_scalar(const float* x, void* dst, int64_t n_in, int32_t off);
void convert_act_q8x64_avx2(const float* x, void* dst, int64_t n_in, int32_t off);
void convert_act_q8x64_avx512(const float* x, void* dst, int64_t n_in, int32_t off);

// x: [n_in] f32 -> dst: act_row_bytes_q8x256(n_in) bytes.
void convert_act_q8x256_scalar(const float* x, void* dst, int64_t n_in);
void convert_act_q8x256_avx2(const float* x, void* dst, int64_t n_in);
void convert_act_q8x256_avx512(const float* x, void* dst, int64_t n_in);

}  // namespace sluice::cpu
