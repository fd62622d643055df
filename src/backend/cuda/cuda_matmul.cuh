// The CUDA matmul (GEMV / small GEMM) kernels with fused dequantization, for
// every weight type sluice reads (cuda_api.h: matmul_supports). Weights stay in
// their GGUF blocks in device memory; each kernel decodes them in registers and
// multiplies with up to 8 token rows of x per pass, so a weight byte is read
// once per 8 tokens. Decode at batch 1 is bound by memory bandwidth, the figure
// these kernels are written for (cuda_matmul.cu explains the layout of work).
//
// Contract: y[t][o] depends only on row o of W and row t of x, and every y[t][o]
// for t < n_tok, o < w.n_out is written. Thread-safe; nothing is allocated.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include "backend/op_types.h"

namespace sluice::cuda {

// y[t][o] = sum_i W[o][i] * x[t][i]   x: [n_tok, w.n_in] (row stride x_stride floats)  y: [n_tok, w.n_out] (row stride y_stride floats)
// w.data is device memory in GGUF row order (w.layout == kRows). Enqueued on `stream`; no sync, no allocation.
// Requirements (CHECKed): matmul_supports(w.type); n_in a multiple of the block
// size; for block types x 16-byte aligned with x_stride % 4 == 0, and w.data 4-
// byte aligned for blocks of a multiple of 4 bytes, 2 for the rest (so a view
// may start at any row). F32/F16/BF16 rows the fast kernel cannot read (n_in
// not a multiple of 8, w.data or x not 16-byte aligned) go to a plain
// warp-per-row kernel instead.
void launch_matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
                   cudaStream_t stream);

// Whether launch_matmul_group takes these matrices as one launch: 1..4 of one
// type and width, GGUF rows, and for float types rows the fast kernel reads
// (n_in % 8 == 0, 16-byte aligned).
bool matmul_groupable(std::span<const WeightView> ws);
// y_p = W_p x for every part p in one launch (q/k/v, gate/up: fewer launches,
// and small matrices no longer run alone on a mostly idle GPU).
//   x: [n_tok, n_in] (16-byte aligned)  ys[p]: [n_tok, ws[p].n_out]
void launch_matmul_group(std::span<const WeightView> ws, std::span<float* const> ys, const float* x, int64_t n_tok,
                         cudaStream_t stream);

// Grouped launches: a routed layer's chosen experts, one launch for all of
// them. Group g (one expert) multiplies its own matrices with its own run of
// rows of a gathered list, rows [off, off + count):
//   ys[p][y_row(i)][o] = W_p(g)[o] . x[x_row(i)]   for off <= i < off + count, p < parts
// x_row(i) = x_rows[i] (null: i), y_row likewise. A row's result is the same
// bits launch_matmul gives that row alone (the kernels add in one order).
struct MatmulGroup {
  const uint8_t* w[2] = {};  // its parts (an expert's gate and up, or its down alone), [n_out, n_in] each
  int32_t off = 0;
  int32_t count = 0;         // > 0
};
struct GroupedRows {
  const MatmulGroup* groups = nullptr;  // device memory [n_groups]
  int64_t n_groups = 0;
  int64_t max_count = 0;                // the largest count (how many rows a pass takes)
  const int32_t* x_rows = nullptr;      // device memory, or null
  const int32_t* y_rows = nullptr;      // device memory, or null
};

// Whether launch_matmul_grouped takes matrices like w (GGUF rows, a decoder,
// n_in a multiple of its block, w.data aligned for its loads).
bool matmul_grouped_takes(const WeightView& w);
// The grouped matmul over every group, with one or two parts (ys.size()).
//   x: [.., x_stride] (16-byte aligned, x_stride % 4 == 0)  ys[p]: [.., y_stride]
// Every group's w[p] must be what matmul_grouped_takes accepts for (type, n_in).
void launch_matmul_grouped(DType type, int64_t n_in, int64_t n_out, const GroupedRows& g, const float* x,
                           int64_t x_stride, std::span<float* const> ys, int64_t y_stride, cudaStream_t stream);

}  // namespace sluice::cuda
