// matmul_t on the CPU: the input gradient through a frozen weight matrix,
//
//   dX[n_tok, n_in] (+)= dY[n_tok, n_out] W[n_out, n_in]     (dx[t] = W^T dy[t])
//
// as the dense product of train_gemm.h with W as the B operand: the B panels
// (kGemmKc rows of W x kGemmNc columns) are dequantized to f32 on the fly,
// once per panel, by the level's vector dequantizer where it has one (F32,
// F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and by dequantize_row for the
// other types. Every panel is used by all the tokens of its output block, so
// at training batch sizes the dequantization is a small share of the time.
//
//        n_in ->            W panel (kc x nc, dequantized into L2)
//   dY  [n_tok, n_out]  x  [n_out, n_in]  =  dX [n_tok, n_in]
//
// Weights in GGUF rows or in the layouts prepare_weights repacks Q4_0 / Q8_0
// into (repack.h): a repacked row's blocks are gathered back to GGUF order
// before they are dequantized, so every layout gives the same bits.
// dx[t][i] is one FMA chain over the rows of W in order (train_gemm.h), so
// results do not depend on the thread count, the token count or the split.
#pragma once

#include <cstddef>

#include "backend/cpu/train_gemm.h"
#include "backend/train_ops.h"

namespace sluice::cpu {

// Whether matmul_t takes this type in this layout: every type the CPU matmul
// takes (matmul_supports), in GGUF rows or its repacked layouts.
bool matmul_t_supports(DType type, WeightLayout layout);

// Floats of scratch matmul_t needs with n_threads threads.
size_t matmul_t_scratch_floats(int n_threads);

// a.dx (+)= a.dy W on every thread of the pool.  scratch: matmul_t_scratch_floats(pool.n_threads()), 64-byte aligned
void matmul_t(const TrainKernels& kn, ThreadPool& pool, const MatmulTArgs& a, float* scratch);

}  // namespace sluice::cpu
