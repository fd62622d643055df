#include "backend/cpu/train_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/fast_ops.h"
#include "backend/cpu/matmul_t.h"
#include "backend/cpu/train_attention.h"
#include "backend/train_math.h"
#include "base/check.h"

namespace sluice::cpu {
namespace {

// Grows buf to at least n floats (contents not kept).
void grow(HugeBuffer& buf, size_t n_floats) {
  if (buf.size() < n_floats * sizeof(float)) buf = HugeBuffer(n_floats * sizeof(float));
}

float* floats(HugeBuffer& buf) { return reinterpret_cast<float*>(buf.data()); }

// Elementwise work in chunks of about this many elements per claim.
constexpr int64_t kChunk = 16384;

}  // namespace

CpuTrainOps::CpuTrainOps(ThreadPool& pool, Isa isa) : pool_(pool), isa_(isa), kn_(train_kernels(isa)) {}

bool CpuTrainOps::supports_matmul_t(DType type, WeightLayout layout) const { return matmul_t_supports(type, layout); }

void CpuTrainOps::reserve(const TrainScratchNeeds& n) {
  const int nt = pool_.n_threads();
  needs_.n_tok = std::max(needs_.n_tok, n.n_tok);
  needs_.n_ctx = std::max(needs_.n_ctx, n.n_ctx);
  needs_.head_dim = std::max(needs_.head_dim, n.head_dim);
  needs_.n_head = std::max(needs_.n_head, n.n_head);
  grow(gemm_, matmul_t_scratch_floats(nt));
  if (needs_.head_dim > 0) {
    attn_per_thread_ = train_attention_scratch_floats(needs_.head_dim, needs_.n_ctx, needs_.n_head);
    grow(attn_, static_cast<size_t>(nt) * attn_per_thread_);
  }
  grow(lora_du_, static_cast<size_t>(std::max<int64_t>(1, needs_.n_tok) * kMaxLoraRank));
}

float* CpuTrainOps::gemm_scratch() {
  CHECK(gemm_.size() >= matmul_t_scratch_floats(pool_.n_threads()) * sizeof(float) && "reserve() first");
  return floats(gemm_);
}

bool CpuTrainOps::supports_forward_matmul(DType type, WeightLayout layout) const {
  return type == DType::kF32 && layout == WeightLayout::kRows;
}

void CpuTrainOps::forward_matmul(const ForwardMatmulArgs& a) {
  CHECK(supports_forward_matmul(a.w.type, a.w.layout));
  // y = x W^T: B is W^T, read down W's rows (pack_b_t transposes them in vectors).
  const auto* w = reinterpret_cast<const float*>(a.w.data);
  gemm_parallel(kn_, pool_, a.n_tok, a.w.n_out, a.w.n_in, StridedMatrix{.p = a.x, .rs = a.w.n_in},
                StridedMatrix{.p = w, .rs = 1, .cs = a.w.n_in}, a.y, a.w.n_out, false, gemm_scratch());
}

void CpuTrainOps::matmul_t(const MatmulTArgs& a) { cpu::matmul_t(kn_, pool_, a, gemm_scratch()); }

void CpuTrainOps::rmsnorm_backward(const RmsNormBackArgs& a) {
  pool_.parallel_for(a.n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x + t * a.n;
      const float* dy = a.dy + t * a.n;
      float* dx = a.dx + t * a.n;
      const RmsNormBackFactors f = rmsnorm_backward_factors(x, dy, a.w, a.n, a.eps);
      const auto r = static_cast<float>(f.r);
      const auto c = static_cast<float>(f.c);
      for (int64_t i = 0; i < a.n; ++i) dx[i] += r * (dy[i] * a.w[i]) - c * x[i];
    }
  });
}

void CpuTrainOps::rope(const RopeArgs& a) {
  const int64_t half = a.n_rot / 2;
  constexpr int64_t kMaxRot = 1024;
  CHECK(a.n_rot % 2 == 0 && a.n_rot <= a.head_dim && a.n_rot <= kMaxRot);
  pool_.parallel_for(a.n_tok, [&](int64_t t0, int64_t t1) {
    float negated[kMaxRot];  // the inverse: the same rotation by -angle
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = a.cos_sin + t * half * 2;
      if (a.inverse) {
        for (int64_t i = 0; i < half; ++i) {
          negated[2 * i] = cs[2 * i];
          negated[2 * i + 1] = -cs[2 * i + 1];
        }
        cs = negated;
      }
      fast::rope(a.x + t * a.n_head * a.head_dim, a.n_head, a.head_dim, a.n_rot, cs, a.layout, isa_);
    }
  });
}

void CpuTrainOps::glu(const GluArgs& a) {
  const int64_t n = a.n_tok * a.n_ff;
  pool_.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t b = c0 * kChunk, e = std::min(n, c1 * kChunk);
    if (a.act == Activation::kGelu) fast::geglu(a.g + b, a.u + b, a.h + b, e - b, isa_);
    else fast::swiglu(a.g + b, a.u + b, a.h + b, e - b, isa_);
  });
}

void CpuTrainOps::glu_backward(const GluBackArgs& a) {
  const int64_t n = a.n_tok * a.n_ff;
  const bool gelu = a.act == Activation::kGelu;
  pool_.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t b = c0 * kChunk, e = std::min(n, c1 * kChunk);
    kn_.glu_backward(a.g + b, a.u + b, a.dh + b, a.dg + b, a.du + b, e - b, gelu);
  });
}

void CpuTrainOps::attention(const TrainAttentionArgs& a) {
  train_attention(kn_, pool_, a, floats(attn_), attn_per_thread_);
}

void CpuTrainOps::attention_backward(const TrainAttentionBackArgs& b) {
  train_attention_backward(kn_, pool_, b, floats(attn_), attn_per_thread_);
}

void CpuTrainOps::cross_entropy(const CrossEntropyArgs& a) {
  pool_.parallel_for_claimed(a.n_tok, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (cross_entropy_ignored_row(a, t)) continue;
      float* z = a.logits + t * a.n_vocab;
      const int32_t target = a.targets[t];
      const float zt = z[target];
      const float m = kn_.max(z, a.n_vocab);
      const double sum = kn_.exp_sum(z, m, z, a.n_vocab);  // z = e^(z - m)
      a.loss[t] = static_cast<double>(m) + std::log(sum) - zt;
      const auto scale = static_cast<float>(a.grad_scale / sum);
      for (int64_t i = 0; i < a.n_vocab; ++i) z[i] *= scale;
      z[target] -= a.grad_scale;
    }
  });
}

void CpuTrainOps::lora_backward(const LoraBackArgs& a) {
  CHECK(a.rank >= 1 && a.rank <= kMaxLoraRank);
  CHECK(a.n_tok <= needs_.n_tok && "reserve() for this many tokens first");
  float* scratch = gemm_scratch();
  float* du = floats(lora_du_);  // [n_tok, rank]
  // du = scale dy B
  gemm_parallel(kn_, pool_, a.n_tok, a.rank, a.n_out, {.p = a.dy, .rs = a.n_out, .cs = 1, .scale = a.scale},
                {.p = a.b, .rs = a.rank, .cs = 1}, du, a.rank, false, scratch);
  // dB += scale dy^T u
  gemm_parallel(kn_, pool_, a.n_out, a.rank, a.n_tok, {.p = a.dy, .rs = 1, .cs = a.n_out, .scale = a.scale},
                {.p = a.u, .rs = a.rank, .cs = 1}, a.db, a.rank, true, scratch);
  // dA += du^T x
  gemm_parallel(kn_, pool_, a.rank, a.n_in, a.n_tok, {.p = du, .rs = 1, .cs = a.rank},
                {.p = a.x, .rs = a.n_in, .cs = 1}, a.da, a.n_in, true, scratch);
  // dx += du A
  if (a.dx != nullptr) {
    gemm_parallel(kn_, pool_, a.n_tok, a.n_in, a.rank, {.p = du, .rs = a.rank, .cs = 1},
                  {.p = a.a, .rs = a.n_in, .cs = 1}, a.dx, a.n_in, true, scratch);
  }
}

void CpuTrainOps::add_rows(const AddRowsArgs& a) {
  pool_.parallel_for(a.n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* x = a.x + t * a.n;
      for (int64_t i = 0; i < a.n; ++i) x[i] += a.v[i];
    }
  });
}

void CpuTrainOps::adamw(const AdamWArgs& a) {
  const AdamWBias bias = adamw_bias(a);
  pool_.parallel_for((a.n + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
    const int64_t e = std::min(a.n, c1 * kChunk);
    for (int64_t i = c0 * kChunk; i < e; ++i) adamw_update(a, bias, i);
  });
}

// The routed FFN's row operators: each thread a contiguous run of output rows.
void CpuTrainOps::gather_rows(const GatherRowsArgs& a) {
  pool_.parallel_for(a.n_rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) gather_row(a, r);
  });
}

void CpuTrainOps::slot_sum(const SlotSumArgs& a) {
  pool_.parallel_for(a.n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) slot_sum_row(a, t);
  });
}

void CpuTrainOps::slot_sum_backward(const SlotSumBackArgs& a) {
  pool_.parallel_for(a.fwd.n_tok, [&](int64_t t0, int64_t t1) {  // token t writes only its own slots' rows
    for (int64_t t = t0; t < t1; ++t) slot_sum_backward_row(a, t);
  });
}

void CpuTrainOps::gated_add(const GatedAddArgs& a) {
  pool_.parallel_for(a.n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) gated_add_row(a, t);
  });
}

void CpuTrainOps::gated_add_backward(const GatedAddBackArgs& a) {
  pool_.parallel_for(a.fwd.n_tok, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) gated_add_backward_row(a, t);
  });
}

}  // namespace sluice::cpu
