// Per-level kernels behind fast_ops.h (internal to the fast_ops files). The
// _avx2 / _avx512 functions live in files compiled for that level and may only
// be called when the CPU supports it; fast_ops.cpp dispatches. This header
// includes nothing with inline code, so the SIMD files see only plain types.
// rope_*: neox selects RopeLayout::kNeox, otherwise kAdjacent.
#pragma once

#include <cstdint>

namespace sluice::cpu::fast {

// Attention of the n_q query heads that share one KV head, over cache positions
// [j0, j1), starting from an empty online-softmax state. Positions are taken in
// blocks of a fixed size starting at j0, so the result depends only on the
// inputs and [j0, j1).
//   q:     [n_q, q_stride] query heads (head_dim used of each)
//   k, v:  position j of this KV head at k + j * kv_stride (same for v)
//   state: per query head g at state + g * state_stride: [m, l, acc[head_dim]]
struct AttnChunk {
  const float* q;
  int64_t q_stride;
  const float* k;
  const float* v;
  int64_t kv_stride;
  int64_t head_dim;
  int64_t n_q;
  int64_t j0;
  int64_t j1;
  float scale;
  float* state;
  int64_t state_stride;
};

void rmsnorm_avx2(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);
void rope_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void add_avx2(const float* a, const float* b, float* out, int64_t n);
void attn_chunk_avx2(const AttnChunk& c);

void rmsnorm_avx512(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);
void rope_avx512(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void add_avx512(const float* a, const float* b, float* out, int64_t n);
void attn_chunk_avx512(const AttnChunk& c);

// Scalar (fast_ops.cpp).
void attn_chunk_scalar(const AttnChunk& c);

}  // namespace sluice::cpu::fast
