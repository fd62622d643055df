// Scalar reference operators: the definitions every backend's kernels are
// held to. The reference backend (reference_backend.h) is built from them,
// the CPU backend runs them at its scalar level, and the SIMD and CUDA kernels
// are tested against them (directly, or through the reference backend in the
// op-case list, op_cases.h).
//
// Plain loops with a fixed accumulation order, so that the same input always
// gives the same bits: a token computed alone (decode) and the same token inside
// a batch (prefill) produce identical results. Matmul and attention split work
// over a ThreadPool; scratch memory comes from the caller (nothing allocates
// here). All functions are thread-safe on disjoint outputs.
#pragma once

#include <cstdint>

#include "backend/op_types.h"
#include "base/thread_pool.h"
#include "quant/dtype.h"

namespace sluice::ref {

// Dot product of two float vectors, 8 interleaved partial sums, fixed order.
float dot_f32(const float* a, const float* b, int64_t n);

// y[t] = W x[t] for each of n_tokens tokens.
//   x:       [n_tokens, w.n_in]
//   y:       [n_tokens, w.n_out]
//   scratch: [pool.n_threads(), w.n_in] floats (a dequantized row per thread)
void matmul(const WeightView& w, const float* x, float* y, int64_t n_tokens, float* scratch,
            ThreadPool& pool);

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n_tokens rows of n.
//   x, out: [n_tokens, n] (may alias);  weight: [n]
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);

// Rotates the first n_rot dims of each of n_heads heads of one token in place.
//   x: [n_heads, head_dim];  cos_sin: [n_rot/2, 2] (cos, sin of pos * inv_freq[i])
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin,
          RopeLayout layout);

// out = silu(gate) * up, elementwise over n. out may alias gate (not up).
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float gelu_tanh(float x);
// out = gelu_tanh(gate) * up, elementwise over n (GeGLU). out may alias gate (not up).
void geglu(const float* gate, const float* up, float* out, int64_t n);

// Causal grouped-query attention with an online softmax (no score matrix),
// optionally over a sliding window and with soft-capped scores.
//   q:     [n_tokens, n_head, head_dim]       query for token t is at position pos0 + t
//   k, v:  [n_ctx, n_head_kv, head_dim]       cache rows 0 .. pos0 + n_tokens - 1 valid
//   out:   [n_tokens, n_head, head_dim]
//   scratch: [pool.n_threads(), head_dim]
struct AttentionArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t n_tokens;
  int64_t pos0;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
  float scale;  // usually 1/sqrt(head_dim)
  int64_t window = 0;    // a query at position P sees P - window + 1 .. P (0: all)
  float softcap = 0.0f;  // s = softcap * tanh(s / softcap) after the scale (0: none)
};
void attention(const AttentionArgs& a, float* scratch, ThreadPool& pool);

}  // namespace sluice::ref
