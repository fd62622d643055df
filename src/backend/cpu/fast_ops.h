// Vectorized forward-pass operators: RMSNorm, RoPE, SwiGLU, GeGLU and residual add,
// each with AVX-512 and AVX2 kernels and a scalar
// fallback, dispatched by instruction-set level. The scalar reference operators
// (backend/reference_ops.h, ref::) are their test oracles (same signatures, same semantics; results
// agree to rounding, not bit for bit).
//
// Every function takes the level to run at as its last argument, defaulting to
// active_isa(); passing a level above max_supported_isa() is a caller bug.
// Call them qualified (fast::rope): the references have the same names.
// (Attention is paged_attention.h.)
// All functions are pure apart from their outputs, allocate nothing and are
// thread-safe on disjoint outputs.
//
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/op_types.h"

namespace sluice::cpu::fast {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight  (as ref::rmsnorm).
//   x, out: [n_tokens, n] (may alias);  weight: [n]
void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps,
             Isa isa = active_isa());

// Rotates the first n_rot dims of each head in place (as ref::rope).
//   x: [n_heads, head_dim];  cos_sin: [n_rot/2, 2] (cos, sin);  n_rot even, <= head_dim
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, RopeLayout layout,
          Isa isa = active_isa());

// out = silu(gate) * up over n elements (as ref::swiglu); out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa = active_isa());

// out = gelu_tanh(gate) * up over n elements (as ref::geglu); out may alias gate.
// Computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), the same function.
void geglu(const float* gate, const float* up, float* out, int64_t n, Isa isa = active_isa());

// out = a + b over n elements (residual add); out may alias a or b.
void add(const float* a, const float* b, float* out, int64_t n, Isa isa = active_isa());

}  // namespace sluice::cpu::fast
