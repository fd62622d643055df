// Dispatch of the elementwise fast ops by level. At Isa::kScalar they are the
// scalar references (backend/reference_ops.h).
#include "backend/cpu/fast_ops.h"

#include <cmath>

#include "backend/cpu/fast_ops_isa.h"
#include "backend/reference_ops.h"

namespace sluice::cpu::fast {

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kOpsAvx512.rmsnorm(x, weight, out, n_tokens, n, eps);
    case Isa::kAvx2: return kOpsAvx2.rmsnorm(x, weight, out, n_tokens, n, eps);
    case Isa::kScalar: return ref::rmsnorm(x, weight, out, n_tokens, n, eps);
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, RopeLayout layout,
          Isa isa) {
  const bool neox = layout == RopeLayout::kNeox;
  switch (isa) {
    case Isa::kAvx512: return kOpsAvx512.rope(x, n_heads, head_dim, n_rot, cos_sin, neox);
    case Isa::kAvx2: return kOpsAvx2.rope(x, n_heads, head_dim, n_rot, cos_sin, neox);
    case Isa::kScalar: return ref::rope(x, n_heads, head_dim, n_rot, cos_sin, layout);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kOpsAvx512.swiglu(gate, up, out, n);
    case Isa::kAvx2: return kOpsAvx2.swiglu(gate, up, out, n);
    case Isa::kScalar: return ref::swiglu(gate, up, out, n);
  }
}

void geglu(const float* gate, const float* up, float* out, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kOpsAvx512.geglu(gate, up, out, n);
    case Isa::kAvx2: return kOpsAvx2.geglu(gate, up, out, n);
    case Isa::kScalar: return ref::geglu(gate, up, out, n);
  }
}

void add(const float* a, const float* b, float* out, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return kOpsAvx512.add(a, b, out, n);
    case Isa::kAvx2: return kOpsAvx2.add(a, b, out, n);
    case Isa::kScalar:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
  }
}

}  // namespace sluice::cpu::fast
