// Per-level kernels behind fast_ops.h (internal to the fast_ops files). The
// _avx2 / _avx512 functions live in files compiled for that level and may only
// be called when the CPU supports it; fast_ops.cpp dispatches. This header
// includes nothing with inline code, so the SIMD files see only plain types.
// rope_*: neox selects RopeLayout::kNeox, otherwise kAdjacent.
#pragma once

#include <cstdint>

namespace sluice::cpu::fast {

void rmsnorm_avx2(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);
void rope_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void add_avx2(const float* a, const float* b, float* out, int64_t n);

void rmsnorm_avx512(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);
void rope_avx512(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox);
void swiglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx512(const float* gate, const float* up, float* out, int64_t n);
void add_avx512(const float* a, const float* b, float* out, int64_t n);

}  // namespace sluice::cpu::fast
