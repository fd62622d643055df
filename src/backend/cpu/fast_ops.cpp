// Dispatch of the elementwise fast ops by level, and the scalar attention
// chunk kernel. At Isa::kScalar the elementwise ops are the ops.h references.
#include "backend/cpu/fast_ops.h"

#include <cmath>
#include <limits>

#include "backend/cpu/fast_ops_isa.h"

namespace sluice::cpu::fast {

// Positions per block in the scalar chunk kernel.
constexpr int64_t kScalarPosBlock = 16;

void rmsnorm(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return rmsnorm_avx512(x, weight, out, n_tokens, n, eps);
    case Isa::kAvx2: return rmsnorm_avx2(x, weight, out, n_tokens, n, eps);
    case Isa::kScalar: return cpu::rmsnorm(x, weight, out, n_tokens, n, eps);
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_sin, RopeLayout layout,
          Isa isa) {
  const bool neox = layout == RopeLayout::kNeox;
  switch (isa) {
    case Isa::kAvx512: return rope_avx512(x, n_heads, head_dim, n_rot, cos_sin, neox);
    case Isa::kAvx2: return rope_avx2(x, n_heads, head_dim, n_rot, cos_sin, neox);
    case Isa::kScalar: return cpu::rope(x, n_heads, head_dim, n_rot, cos_sin, layout);
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return swiglu_avx512(gate, up, out, n);
    case Isa::kAvx2: return swiglu_avx2(gate, up, out, n);
    case Isa::kScalar: return cpu::swiglu(gate, up, out, n);
  }
}

void add(const float* a, const float* b, float* out, int64_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return add_avx512(a, b, out, n);
    case Isa::kAvx2: return add_avx2(a, b, out, n);
    case Isa::kScalar:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
  }
}

// Online softmax over blocks of 16 positions: per block and head, scores s_j,
// new max m' = max(m, max_j s_j), rescale (l, acc) by exp(m - m') when the max
// grew, then l += sum_j p_j and acc += sum_j p_j v_j with p_j = exp(s_j - m').
void attn_chunk_scalar(const AttnChunk& c) {
  const int64_t hd = c.head_dim;
  for (int64_t g = 0; g < c.n_q; ++g) {
    float* st = c.state + g * c.state_stride;
    st[0] = -std::numeric_limits<float>::infinity();
    st[1] = 0.0f;
    for (int64_t d = 0; d < hd; ++d) st[2 + d] = 0.0f;
  }
  float s[kScalarPosBlock];
  for (int64_t jb = c.j0; jb < c.j1; jb += kScalarPosBlock) {
    const int64_t nb = c.j1 - jb < kScalarPosBlock ? c.j1 - jb : kScalarPosBlock;
    for (int64_t g = 0; g < c.n_q; ++g) {
      const float* q = c.q + g * c.q_stride;
      float* st = c.state + g * c.state_stride;
      float bm = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < nb; ++j) {
        s[j] = dot_f32(q, c.k + (jb + j) * c.kv_stride, hd) * c.scale;
        bm = s[j] > bm ? s[j] : bm;
      }
      float alpha = 1.0f;
      if (bm > st[0]) {
        alpha = std::exp(st[0] - bm);
        st[0] = bm;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < nb; ++j) {
        s[j] = std::exp(s[j] - st[0]);
        sum += s[j];
      }
      st[1] = st[1] * alpha + sum;
      float* acc = st + 2;
      for (int64_t d = 0; d < hd; ++d) {
        float a = acc[d] * alpha;
        for (int64_t j = 0; j < nb; ++j) a += s[j] * c.v[(jb + j) * c.kv_stride + d];
        acc[d] = a;
      }
    }
  }
}

}  // namespace sluice::cpu::fast
