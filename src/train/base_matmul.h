// The frozen base's products going forward in a training step (TrainStep,
// RoutedFfnTrain): through TrainOps::forward_matmul when the backend has it
// for every matrix of the dispatch (a GEMM over the whole micro-batch: on the
// CPU, F32 weights, 1.2-1.5x its per-token kernels at 512 tokens), else
// through the Backend's own matmul, as inference multiplies.
//
// Either way row t depends only on row t, so a layer's forward and its rerun
// in the backward, a resident and a streamed base, and every split of the
// micro-batch give the same bits; the two paths differ from each other in the
// order of their sums (f32 rounding), so a training step's logits match the
// inference's to that rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "backend/train_ops.h"

namespace sluice {

// y = W x for each out.  x: [n_tok, n_in];  every out.w.n_in == n_in
void base_matmul(Backend& be, TrainOps& ops, std::span<const MatmulOut> outs, const float* x, int64_t n_in,
                 int64_t n_tok);

// xn = rmsnorm(x) * norm, then y = W xn for each out (NormMatmulArgs).
void base_norm_matmul(Backend& be, TrainOps& ops, const NormMatmulArgs& a);

}  // namespace sluice
