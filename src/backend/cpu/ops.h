// CPU reference operators for the llama-family forward pass.
//
// Plain loops with a fixed accumulation order, so that the same input always
// gives the same bits: a token computed alone (decode) and the same token inside
// a batch (prefill) produce identical results. These are the scalar references
// later SIMD kernels are tested against. Matmul and attention split work over a
// ThreadPool; scratch memory comes from the caller (nothing allocates here).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "quant/dtype.h"

namespace sluice::cpu {

// How a weight matrix's blocks are ordered in memory (repack.h).
enum class WeightLayout {
  kRows,    // GGUF order: row after row
  kQ4_0x4,  // Q4_0, rows interleaved in groups of 4 (repack.h); same byte count
  kQ8_0x4,  // Q8_0, likewise
  kQ8_0x16, // Q8_0, 16 rows side by side in 4-byte lanes (repack.h); same byte count
};

// A weight matrix: n_out rows of n_in elements of `type`, in GGUF row order
// unless `layout` says the blocks were repacked at load.
struct WeightView {
  DType type = DType::kF32;
  const uint8_t* data = nullptr;  // [n_out, n_in] in `type` blocks, ordered by `layout`
  int64_t n_in = 0;
  int64_t n_out = 0;
  WeightLayout layout = WeightLayout::kRows;
};

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

enum class RopeLayout {
  kAdjacent,  // rotate pairs (x[2i], x[2i+1]): GGUF llama layout
  kNeox,      // rotate pairs (x[i], x[i + n_rot/2]): NeoX / HF rotate_half layout
};

// Rotates the first n_rot dims of each of n_heads heads of one token in place.
//   x: [n_heads, head_dim];  cos_sin: [n_rot/2, 2] (cos, sin of pos * inv_freq[i])
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin,
          RopeLayout layout);

// out = silu(gate) * up, elementwise over n. out may alias gate (not up).
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// Causal grouped-query attention with an online softmax (no score matrix).
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
};
void attention(const AttentionArgs& a, float* scratch, ThreadPool& pool);

}  // namespace sluice::cpu
