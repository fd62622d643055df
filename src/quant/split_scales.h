// Q4_0 and Q8_0 matrices with each block's f16 scale split off from its
// quants: the layout the CUDA backend reads (WeightLayout::kSplitScales).
//
// GGUF rows put the 2-byte scale before each block's 16 (Q4_0) or 32 (Q8_0)
// quant bytes, so a block is 18 or 34 bytes and only 2-byte aligned: a GPU
// lane then reads its block with nine or seventeen 2-byte loads. Split, the
// quants of every block sit back to back and a lane takes one (Q4_0) or two
// (Q8_0) 16-byte loads, the scales beside them:
//
//   [n_out * n_b][kQuantBytes]   quants, row after row, block after block
//   [n_out * n_b] f16            scales, in the same order
//
// n_b = n_in / 32. Same byte count as the rows; when the matrix starts
// 16-byte aligned, so does every block's quants. Pure functions, no allocation.
#pragma once

#include <cstdint>

#include "quant/dtype.h"

namespace sluice {

// Whether a matrix of this type and width can be split (Q4_0 / Q8_0, n_in % 32 == 0).
bool split_scales_takes(DType type, int64_t n_in);
// Quant bytes of one block of the type (16 or 32).
int64_t split_quant_bytes(DType type);
// rows: [n_out] GGUF rows; out: the split layout of the same bytes (no overlap).
void split_scales(DType type, const uint8_t* rows, int64_t n_out, int64_t n_in, uint8_t* out);
// The inverse: split -> GGUF rows.
void join_scales(DType type, const uint8_t* split, int64_t n_out, int64_t n_in, uint8_t* rows);

}  // namespace sluice
