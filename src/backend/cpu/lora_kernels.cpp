// Dispatch of the LoRA kernels by level; the scalar level is plain loops.
#include "backend/cpu/lora_kernels.h"

namespace sluice::cpu {

void lora_down(const float* a, const float* x, int64_t n_in, int64_t r0, int64_t r1, float* u, Isa isa) {
  if (isa >= Isa::kAvx2) return lora_down_avx2(a, x, n_in, r0, r1, u);
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = a + r * n_in;
    float s = 0.0f;
    for (int64_t i = 0; i < n_in; ++i) s += row[i] * x[i];
    u[r] = s;
  }
}

void lora_up(const float* b, const float* u, int64_t rank, float scale, int64_t o0, int64_t o1, float* y, Isa isa) {
  if (isa >= Isa::kAvx2) return lora_up_avx2(b, u, rank, scale, o0, o1, y);
  for (int64_t o = o0; o < o1; ++o) {
    const float* row = b + o * rank;
    float s = 0.0f;
    for (int64_t r = 0; r < rank; ++r) s += row[r] * u[r];
    y[o] += scale * s;
  }
}

}  // namespace sluice::cpu
