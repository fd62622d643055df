// Matmuls of quantized weights (every type but the float ones) against 8-bit
// activations, with integer dot products (dp4a): the decode path.
//
// The float kernels of cuda_matmul.cuh decode every weight to float and read
// x as floats: per 32 weights ~160 instructions and 128 bytes of x from L1
// against 18 bytes of Q4_0 from HBM, so they run out of issue slots long
// before HBM runs out of bandwidth. Here x is first quantized once per
// dispatch to blocks of 32 int8 with a float scale (quantize_x), and a
// 32-weight block costs 8 dp4a on 4-byte words and 32 bytes of x.
//
//   x block b of token t:  q[32] int8, d = max|x| / 127, q = round(x / d)
//                          s = d * sum(q)      (Q4_0's -8 offset: sum (q_w - 8) q_x = sum q_w q_x - 8 sum q_x)
//   Q8_0 . x = d_w * d * sum(q_w * q)
//   Q4_0 . x = d_w * (d * sum(q_w * q) - 8 * s)
//   Q4_K, Q5_K . x = sum over sub-blocks: d_w * sc * d * sum(q_w * q) - dmin_w * m * s
//   Q6_K . x = sum over sub-blocks of 16: d_w * sc * d * sum((q_w - 32) * q)
// and the other types alike (cuda_dp4a_formats.cuh, cuda_dp4a_formats_more.cuh:
// how each type's blocks are cut among the lanes).
//
// Like the CPU backend's 8-bit activations, this is not the float reference
// bit for bit (the per-op suite bounds the error); a token's result still
// depends on that token alone.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_matmul.cuh"
#include "backend/op_types.h"

namespace sluice::cuda {

// x quantized to blocks of 32: [n_tok, n_in] int8, [n_tok, n_in / 32] scales and scaled sums.
struct QuantizedX {
  int8_t* q = nullptr;
  float* d = nullptr;
  float* s = nullptr;
  int64_t n_in = 0;  // row stride of q; of d and s: n_in / 32
};

// Whether launch_matmul_q8 takes this matrix: a quantized type in GGUF rows
// with n_in a multiple of its block and w.data aligned for its format's loads
// (2 bytes for Q4_0, Q8_0, Q5_0, IQ4_NL; 4 for Q4_1, Q2_K, Q3_K, Q6_K; 8 for
// Q5_1, IQ4_XS; 16 for Q4_K, Q5_K), or Q4_0 / Q8_0 with the scales split off
// (quant/split_scales.h, 16-byte aligned; the layout prepare_weights gives
// them: each block's quants one or two 16-byte loads instead of nine or
// seventeen 2-byte ones).
// SLUICE_CUDA_DP4A_ALL=0 takes only Q4_0 / Q8_0 and leaves the rest to the
// float-x kernels (an A/B).
bool matmul_q8_takes(const WeightView& w);
// qx = quantize(x).  x: [n_tok, x_stride] (n_in used), n_in % 32 == 0.
void quantize_x(const float* x, int64_t x_stride, int64_t n_in, int64_t n_tok, const QuantizedX& qx, cudaStream_t s);
// The same quantization fused with the operation that makes x, one kernel
// instead of two (decode is a chain of small launches):
//   x[t] += add[t] (when add is set: the residual add before the norm),
//   xn[t] = rmsnorm(x[t]) * w, qx = quantize(xn)      x, xn, add: [n_tok, n]
void rmsnorm_quantize_x(float* x, const float* add, const float* w, float eps, float* xn, int64_t n_tok, int64_t n,
                        const QuantizedX& qx, cudaStream_t s);
//   gate[t] = act(gate[t]) * up[t], qx = quantize(gate)   gate, up: [n_tok, n]
void glu_quantize_x(float* gate, const float* up, int64_t n_tok, int64_t n, Activation act, const QuantizedX& qx,
                    cudaStream_t s);

// ys[p][t][o] = W_p[o] . x[t] with x as quantized, for 1..4 matrices of one
// type, width and layout in one launch (q/k/v, gate/up).  ys[p]: [n_tok, ws[p].n_out]
void launch_matmul_q8(std::span<const WeightView> ws, std::span<float* const> ys, const QuantizedX& qx, int64_t n_tok,
                      cudaStream_t s);

// launch_matmul_q8's matmul on the int8 tensor cores (cuda_mmq.cu,
// cuda_mmq_formats.cuh; the same matrices), for batches past the dp4a
// kernels' 8 tokens a pass: one pass over the weights serves up to 32
// tokens. Not the dp4a kernels' bits (the sums go in another order); a
// token's result still depends on that token alone.
void launch_matmul_mmq(std::span<const WeightView> ws, std::span<float* const> ys, const QuantizedX& qx, int64_t n_tok,
                       cudaStream_t s);
// Calls of at least this many tokens take launch_matmul_mmq (unless
// SLUICE_CUDA_MMQ=0); fewer take the dp4a kernels.
inline constexpr int64_t kMmqMinTokens = 9;

// launch_matmul_grouped's grouped matmul (cuda_matmul.cuh) with x as
// quantized: group g's rows read rows x_row(i) of qx. Every group's w[p] is a
// matrix of (type, layout, n_in, n_out) that matmul_q8_takes, each aligned
// as matmul_q8_takes asks of its type (as launch_matmul_q8 reads them).
void launch_matmul_q8_grouped(DType type, WeightLayout layout, int64_t n_in, int64_t n_out, const GroupedRows& g,
                              const QuantizedX& qx, std::span<float* const> ys, int64_t y_stride, cudaStream_t s);

}  // namespace sluice::cuda
