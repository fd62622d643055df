// Vectorized forward-pass operators: RMSNorm, RoPE, SwiGLU, residual add and
// causal GQA attention, each with AVX-512 and AVX2 kernels and a scalar
// fallback, dispatched by instruction-set level. The scalar reference operators
// in ops.h are their test oracles (same signatures, same semantics; results
// agree to rounding, not bit for bit).
//
// Every function takes the level to run at as its last argument, defaulting to
// active_isa(); passing a level above max_supported_isa() is a caller bug.
// Call them qualified (fast::rope, fast::attention): ops.h has the same names,
// which RopeLayout and AttentionArgs bring in by argument-dependent lookup.
// All functions are pure apart from their outputs, allocate nothing and are
// thread-safe on disjoint outputs.
//
// Attention (online softmax; the score matrix is never stored) is split into
// fixed KV chunks of kAttnKvChunk positions:
//
//   positions of query token t:  0 ............................... pos0 + t
//   chunks:                      [0,256) [256,512) ... [c*256, pos0 + t + 1)
//   per (token, head, chunk):    partial state (m, l, acc[head_dim]), m = max
//                                score, l = sum exp(s - m), acc = sum exp(s - m) v
//   per (token, head):           states folded left to right, chunk 0 first:
//                                  m = max(m1, m2), a_i = exp(m_i - m)
//                                  l = l1 a1 + l2 a2,  acc = acc1 a1 + acc2 a2
//                                then out = acc * (1 / l)
//
// The chunking and the fold order depend only on the token's position, so a
// token's output has the same bits whether it is decoded alone or sits in a
// prefill batch, and whatever the thread count. Work is split two ways:
//   - items (token, kv head) over threads, each running all its chunks and the
//     fold (prefill: many items; one pass), or
//   - split-KV (flash-decoding) when n_tokens <= kAttnSplitMaxTokens and the
//     context spans several chunks: items (token, kv head, chunk) over threads
//     write partial states, then attention_combine folds them per (token, head).
// Each kernel call handles every query head of one KV head together, so a block
// of K/V rows is read from memory once per group (GQA).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace sluice::cpu::fast {

// KV positions per attention chunk (the unit of split-KV work and of the fold).
constexpr int64_t kAttnKvChunk = 256;
// Batches of at most this many query tokens use split-KV (decode, small
// speculative batches); larger ones split over (token, kv head) items.
constexpr int64_t kAttnSplitMaxTokens = 4;

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight  (as cpu::rmsnorm).
//   x, out: [n_tokens, n] (may alias);  weight: [n]
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps,
             Isa isa = active_isa());

// Rotates the first n_rot dims of each head in place (as cpu::rope).
//   x: [n_heads, head_dim];  cos_sin: [n_rot/2, 2] (cos, sin);  n_rot even, <= head_dim
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, RopeLayout layout,
          Isa isa = active_isa());

// out = silu(gate) * up over n elements (as cpu::swiglu); out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa = active_isa());

// out = a + b over n elements (residual add); out may alias a or b.
void add(const float* a, const float* b, float* out, int64_t n, Isa isa = active_isa());

// Floats of the `partials` buffer the attention functions need for any call
// whose heads and head_dim equal a_max's, with n_tokens <= a_max.n_tokens,
// pos0 + n_tokens <= a_max.pos0 + a_max.n_tokens, and at most n_threads threads.
size_t attention_partials_floats(const AttentionArgs& a_max, int n_threads);

// True when attention over `a` uses split-KV, i.e. attention_combine has work.
bool attention_uses_split(const AttentionArgs& a);

// Phase 1, run by every thread ti of nt: computes the outputs of its items, or
// (split-KV) their partial states in `partials`.
void attention_partial(const AttentionArgs& a, float* partials, int ti, int nt, Isa isa = active_isa());

// Phase 2, after every thread finished phase 1 (a barrier): thread ti of nt
// (the same nt as phase 1) folds the partial states of its (token, head) items
// and writes out. Returns at once when !attention_uses_split(a).
void attention_combine(const AttentionArgs& a, float* partials, int ti, int nt);

// Both phases on a pool (one run_on_all, two when split-KV); no allocation.
//   partials: attention_partials_floats(a_max, pool.n_threads()) floats
void attention(const AttentionArgs& a, float* partials, ThreadPool& pool, Isa isa = active_isa());

}  // namespace sluice::cpu::fast
