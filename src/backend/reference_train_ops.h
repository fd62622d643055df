// ReferenceTrainOps: the training operators (backend/train_ops.h) as plain
// scalar loops with double accumulators, one thread, GGUF-row weights only.
// The yardstick every faster implementation is compared with; a training
// step run through it reproduces the float64 PyTorch reference within f32
// rounding. Not thread-safe.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/train_ops.h"

namespace sluice {

class ReferenceTrainOps final : public TrainOps {
 public:
  bool supports_matmul_t(DType type, WeightLayout layout) const override;
  // GGUF rows of every type: the same dot_row loop as ReferenceBackend::matmul.
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
  std::vector<float> row_;     // [n_in_max] one dequantized weight row
  std::vector<double> acc_;    // [max(n_in_max, n_ctx)] accumulators
  std::vector<double> probs_;  // [n_ctx] one query's attention probabilities
};

// y[t][r] = dot_row(row r of w, x[t]) (quant/quant.h): the reference's matmul,
// going forward and in training's forward_matmul.  w in GGUF rows.
void reference_matmul_rows(const WeightView& w, const float* x, float* y, int64_t n_tok);

// y[t] += scale * B (A x[t]) per segment, u[t] = A x[t] when asked: the
// reference of Backend::lora (LoraArgs), shared by backends' tests.
void reference_lora(const LoraArgs& a);

}  // namespace sluice
