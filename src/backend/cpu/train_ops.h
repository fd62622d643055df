// CpuTrainOps: the training operators (backend/train_ops.h) on the CPU
// backend's thread pool, at its instruction-set level.
//
//   matmul_t            matmul_t.h: dequantized B panels, packed f32 products
//   attention (+ back)  train_attention.h: tiles of 48 queries x 64 keys
//   lora_backward       four packed products (train_gemm.h): du = s dy B,
//                       dB += s dy^T u, dA += du^T x, dx += du A
//   cross_entropy       rows claimed by the threads; max, e^(z - max) and its
//                       sum (double) in vectors, one pass to scale
//   rmsnorm_backward, rope, glu, glu_backward, adamw, and the routed FFN's
//   gather_rows, slot_sum, gated_add (and backwards)
//                       per row or per element, contiguous chunks per thread;
//                       rope and glu are the forward pass's own kernels
//                       (fast_ops.h), the inverse rotation by the negated sines;
//                       rmsnorm_backward's row sums, adamw's update and the
//                       routed FFN's rows are the reference's own (train_math.h)
//
// Every result is bit-identical from run to run and for any thread count:
// each output element is computed by one thread in a fixed order (sums over
// tokens and keys included), whichever thread it is. reserve() sizes the
// scratch (per thread); the operators then allocate nothing. Not
// thread-safe: calls come from one thread (the pool's caller).
#pragma once

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/train_gemm.h"
#include "backend/train_ops.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"

namespace sluice::cpu {

class CpuTrainOps final : public TrainOps {
 public:
  // pool: the backend's, outliving this; isa at most max_supported_isa().
  CpuTrainOps(ThreadPool& pool, Isa isa);

  bool supports_matmul_t(DType type, WeightLayout layout) const override;
  // F32 rows: the packed GEMM (train_gemm.h) over the micro-batch, 1.2-1.5x
  // the per-token tiles of Backend::matmul at 512 tokens.
  bool supports_forward_matmul(DType type, WeightLayout layout) const override;
  void reserve(const TrainScratchNeeds& needs) override;

  void forward_matmul(const ForwardMatmulArgs& a) override;
  void matmul_t(const MatmulTArgs& a) override;
  void rmsnorm_backward(const RmsNormBackArgs& a) override;
  void rope(const RopeArgs& a) override;
  void glu(const GluArgs& a) override;
  void glu_backward(const GluBackArgs& a) override;
  void attention(const TrainAttentionArgs& a) override;
  void attention_backward(const TrainAttentionBackArgs& a) override;
  void cross_entropy(const CrossEntropyArgs& a) override;
  void lora_backward(const LoraBackArgs& a) override;
  void adamw(const AdamWArgs& a) override;
  void add_rows(const AddRowsArgs& a) override;
  void gather_rows(const GatherRowsArgs& a) override;
  void slot_sum(const SlotSumArgs& a) override;
  void slot_sum_backward(const SlotSumBackArgs& a) override;
  void gated_add(const GatedAddArgs& a) override;
  void gated_add_backward(const GatedAddBackArgs& a) override;

 private:
  float* gemm_scratch();

  ThreadPool& pool_;
  Isa isa_;
  const TrainKernels& kn_;
  TrainScratchNeeds needs_;
  HugeBuffer gemm_;         // matmul_t_scratch_floats(n_threads) floats
  HugeBuffer attn_;         // [n_threads, attn_per_thread_] floats
  size_t attn_per_thread_ = 0;
  HugeBuffer lora_du_;      // [n_tok, kMaxLoraRank] floats
};

// The largest adapter rank lora_backward takes.
constexpr int64_t kMaxLoraRank = 256;

}  // namespace sluice::cpu
