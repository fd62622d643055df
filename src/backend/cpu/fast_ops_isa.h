// Per-level kernels behind fast_ops.h (internal to the fast_ops files). Each
// level's table lives in a file compiled for that level (fast_ops_avx2.cpp,
// fast_ops_avx512.cpp) and may only be called when the CPU supports it;
// fast_ops.cpp dispatches. This header includes nothing with inline code, so
// the SIMD files see only plain types.
#pragma once

#include <cstdint>

namespace sluice::cpu::fast {

// One level's kernels, with the contracts of fast_ops.h. rope: neox selects
// RopeLayout::kNeox, otherwise kAdjacent.
struct LevelOps {
  void (*rmsnorm)(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps);
  void (*rope)(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, bool neox);
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);
  void (*geglu)(const float* gate, const float* up, float* out, int64_t n);
  void (*add)(const float* a, const float* b, float* out, int64_t n);
};

extern const LevelOps kOpsAvx2;    // fast_ops_avx2.cpp
extern const LevelOps kOpsAvx512;  // fast_ops_avx512.cpp

}  // namespace sluice::cpu::fast
