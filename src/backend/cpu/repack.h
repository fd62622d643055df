// Weight layouts repacked at load for faster decode, and the functions that
// build them. A repacked matrix holds exactly the bytes of the GGUF matrix, in
// another order; the matmul kernels for it (quant_rows.h) compute the same
// integer lanes and float operations per (row, token) as the kernels for GGUF
// rows at the same instruction-set level, so results are bit-identical whichever
// layout a matrix is in (resident repacked weights equal streamed GGUF weights).
//
// Q4_0x4: Q4_0 rows interleaved in groups of 4, so one decode step reads one
// sequential stream and keeps 4 independent accumulator chains busy, and a
// block's nibbles reach the activations' element order with one shift and one
// mask (GGUF rows need two word permutes). Per group of rows 4g .. 4g+3, for
// each pair of blocks (2p, 2p+1) of those rows, a record of 144 bytes:
//
//   byte 0                    16        48        80        112       144
//        +--------------------+---------+---------+---------+---------+
//        | d[4][2] f16        | nib r0  | nib r1  | nib r2  | nib r3  |
//        | row i: d(2p) d(2p+1)| 32 bytes each                         |
//        +--------------------+---------+---------+---------+---------+
//
//   nib byte k (0..31) of row i = e(2p, k) | e(2p+1, k) << 4
//   where e(b, k) is the 4-bit quant of element k of block b of the row
//   (GGUF: element k < 16 is the low nibble of qs[k], 16 + k the high one).
//
// So the low nibbles of a record row are block 2p in element order and the high
// nibbles block 2p + 1: exactly the 64 activation bytes of one ActQ8x64 group.
// A group of 4 rows is n_in / 64 records, 4 * row_bytes bytes, so row group g
// starts at byte 4 * g * row_bytes as in the GGUF matrix.
//
// Q8_0x8: 8 rows side by side, for the AVX2 kernel, which holds one row per
// int32 lane: one maddubs multiplies 4 bytes of each of the 8 rows by the same 4
// activation bytes (broadcast), so a block's dot product is summed in integers
// and takes one float update per token for all 8 rows. Per group of rows
// 8g .. 8g+7, for each block b of those rows, a record of 272 bytes:
//
//   byte 0            16         48         80               240        272
//        +-------------+----------+----------+--- ... ---+----------+
//        | d[8] f16    | chunk 0  | chunk 1  |           | chunk 7  |
//        | row i: d(b) | 32 bytes | 32 bytes |           | 32 bytes |
//        +-------------+----------+----------+--- ... ---+----------+
//
//   chunk k, bytes 4i .. 4i+3 = q (signed, as in GGUF) of elements 4k .. 4k+3
//   of block b of row i (lane i of the 256-bit vector the chunk is loaded into).
//
// A group of 8 rows is n_in / 32 records, 8 * row_bytes bytes, so row group g
// starts at byte 8 * g * row_bytes as in the GGUF matrix.
//
// Q4_0x8: the same 8 rows side by side for Q4_0 at the AVX2 level, a record of
// 144 bytes per block b:
//
//   byte 0            16         48         80         112        144
//        +-------------+----------+----------+----------+----------+
//        | d[8] f16    | chunk 0  | chunk 1  | chunk 2  | chunk 3  |
//        | row i: d(b) | 32 bytes each                            |
//        +-------------+----------+----------+----------+----------+
//
//   chunk c, bytes 4i .. 4i+3 = row i's qs[4c .. 4c+3] of block b, as in GGUF:
//   the low nibbles are elements 4c .. 4c+3, the high ones 16 + 4c .. 16 + 4c+3.
//
// A group of 8 rows is n_in / 32 records, 8 * row_bytes bytes.
//
// Q8_0x16: 16 rows side by side, for the AVX-512 VNNI kernel, which holds one
// row per int32 lane: one vpdpbusd multiplies 4 bytes of each of the 16 rows by
// the same 4 activation bytes, so a block's dot product is summed in integers
// and takes one float update per token for all 16 rows. Per group of rows
// 16g .. 16g+15, for each block b of those rows, a record of 544 bytes:
//
//   byte 0            32         96         160              480        544
//        +-------------+----------+----------+--- ... ---+----------+
//        | d[16] f16   | chunk 0  | chunk 1  |           | chunk 7  |
//        | row i: d(b) | 64 bytes | 64 bytes |           | 64 bytes |
//        +-------------+----------+----------+--- ... ---+----------+
//
//   chunk k, bytes 4i .. 4i+3 = q ^ 0x80 (= q + 128) of elements 4k .. 4k+3 of
//   block b of row i (lane i of the 512-bit vector the chunk is loaded into).
//
// A group of 16 rows is n_in / 32 records, 16 * row_bytes bytes, so row group g
// starts at byte 16 * g * row_bytes as in the GGUF matrix.
//
// Repacking needs n_out % 4 == 0 and n_in % 64 == 0 (whole block pairs) for
// Q4_0x4, n_out % 8 == 0 for Q8_0x8 and Q4_0x8 and n_out % 16 == 0 for Q8_0x16
// (n_in a multiple of 32 for these); other matrices keep GGUF rows.
// Functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/cpu_features.h"
#include "backend/op_types.h"
#include "quant/dtype.h"

namespace sluice::cpu {

constexpr int64_t kX4Rows = 4;               // rows per interleaved group
constexpr int64_t kQ4_0x4Rows = kX4Rows;
constexpr size_t kQ4_0x4RecordBytes = 144;  // one block pair of 4 rows
constexpr int64_t kX8Rows = 8;               // rows per Q8_0x8 / Q4_0x8 group
constexpr size_t kQ8_0x8RecordBytes = 272;   // one block of 8 rows
constexpr size_t kQ4_0x8RecordBytes = 144;
constexpr int64_t kX16Rows = 16;             // rows per Q8_0x16 group
constexpr size_t kQ8_0x16RecordBytes = 544;  // one block of 16 rows

// The layout a matrix of (type, n_out, n_in) is repacked to for the kernels of
// instruction-set level `isa`; kRows if none. At the AVX-512 level Q8_0 goes to
// kQ8_0x16 and Q4_0 to kQ4_0x4, at AVX2 to kQ8_0x8 and kQ4_0x8 (their kernels).
WeightLayout repack_layout(DType type, int64_t n_out, int64_t n_in, Isa isa);

// The layout each matrix of one matmul_group dispatch gets at load: all of them
// their repack_layout(), or, if any has none (or at the scalar level), all kRows,
// so every repacked job starts on a row-group boundary of the dispatch.
//   layouts: [group.size()] out
void group_layouts(std::span<const WeightView> group, Isa isa, WeightLayout* layouts);

// Rows per interleaved group of a repacked layout (4, 8 or 16); 1 for kRows.
int64_t repack_group_rows(WeightLayout layout);

// Every repacked layout (they follow kRows in the enum).
constexpr WeightLayout kRepackedLayouts[] = {WeightLayout::kQ4_0x4, WeightLayout::kQ8_0x8, WeightLayout::kQ8_0x16,
                                             WeightLayout::kQ4_0x8};
static_assert(static_cast<int>(WeightLayout::kRows) == 0, "kRows is the first layout");

// The weight type a repacked layout holds (kQ4_0 or kQ8_0); kRows: none (CHECK).
DType repacked_type(WeightLayout layout);

// "q4_0x4", "q4_0x8", "q8_0x8", "q8_0x16" or "rows".
const char* layout_name(WeightLayout layout);

// Rows [r0, r1) of src (GGUF Q4_0 rows) -> dst, both laid out for the whole
// matrix of n_out rows; r0 and r1 multiples of 4, so disjoint ranges can be
// repacked by different threads.
//   src: [n_out, row_bytes(kQ4_0, n_in)]   dst: the same number of bytes
void repack_q4_0x4(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);

// Inverse of repack_q4_0x4 for one row: writes row r's GGUF bytes
// (row_bytes(kQ4_0, n_in)) to dst. For tests and the scalar kernel.
void unpack_q4_0x4_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r);

// The same pair for Q8_0x8 (r0, r1 multiples of 8; n_in a multiple of 32).
void repack_q8_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);
void unpack_q8_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r);

// The same pair for Q4_0x8 (r0, r1 multiples of 8; n_in a multiple of 32).
void repack_q4_0x8(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);
void unpack_q4_0x8_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r);

// The same pair for Q8_0x16 (r0, r1 multiples of 16; n_in a multiple of 32).
void repack_q8_0x16(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);
void unpack_q8_0x16_row(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r);

// Repacks rows [r0, r1) of a matrix into `layout` (not kRows), as above.
void repack_rows(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);
// The same bytes with the fastest code level `isa` has for the layout (from
// AVX2 up, in vector registers: repack_lanes_avx2 and repack_q4_0x4_avx2,
// several times faster).
void repack_rows_at(Isa isa, WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0,
                    int64_t r1);
// repack_rows for kQ4_0x8, kQ8_0x8 and kQ8_0x16 in AVX2 (repack_avx2.cpp); needs an AVX2 CPU.
void repack_lanes_avx2(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);
// repack_q4_0x4 in AVX2 (repack_avx2.cpp); needs an AVX2 CPU.
void repack_q4_0x4_avx2(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1);

}  // namespace sluice::cpu
