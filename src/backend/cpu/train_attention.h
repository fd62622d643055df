// Training attention on the CPU (TrainAttentionArgs, TrainAttentionBackArgs):
// causal grouped-query attention over whole sequences in plain rows, forward
// and backward, in tiles of kAttnQueries queries x kAttnKeys keys; no score
// matrix larger than a tile is ever held. The products inside a tile are the
// packed products of train_gemm.h (scores = Q K^T, out += P V, ...).
//
// Forward, per (sequence, head, block of queries), the blocks claimed by the
// threads in turn: online softmax over the key tiles the block reads
// (max m, sum l, out rescaled when m grows), then out /= l, lse = m + log l.
//
// Backward, per (sequence, kv head), again claimed in turn: for each key tile
// j (ascending), for each query tile i that reads it (ascending), for each
// query head of the group (ascending):
//
//   S = scale Q_i K_j^T (soft-capped as forward),  P = e^(S - lse)
//   dP = dO_i V_j^T,  dS = P (dP - D) cap'(S) scale,   D = dO . out per row
//                                                      (once per unit, in double)
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i,  dQ_i += dS K_j
//
// The unit owns dK, dV of its kv head and dQ of its query heads, so nothing
// is shared between threads, and every sum runs in that fixed order: results
// are bit-identical for any thread count. Scratch per thread is fixed by
// the shapes (train_attention_scratch_floats); nothing allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/train_gemm.h"
#include "backend/train_ops.h"

namespace sluice::cpu {

constexpr int64_t kAttnQueries = 48;  // queries per tile (a multiple of every level's mr)
constexpr int64_t kAttnKeys = 64;     // keys per tile (a multiple of every level's nr)

// Floats of scratch one thread needs for heads of head_dim, sequences of up
// to n_ctx tokens and up to n_head query heads.
size_t train_attention_scratch_floats(int64_t head_dim, int64_t n_ctx, int64_t n_head);

// a.out, a.lse as TrainAttentionArgs says.  scratch: [pool.n_threads() * per_thread], 64-byte aligned
void train_attention(const TrainKernels& kn, ThreadPool& pool, const TrainAttentionArgs& a, float* scratch,
                     size_t per_thread);

// b.dq, b.dk, b.dv as TrainAttentionBackArgs says (overwritten).
void train_attention_backward(const TrainKernels& kn, ThreadPool& pool, const TrainAttentionBackArgs& b,
                              float* scratch, size_t per_thread);

}  // namespace sluice::cpu
