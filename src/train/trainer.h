// LoraTrainer: the optimizer loop of a fine-tuning run over TrainData.
//
// Step s (0-based) of n_steps takes batch x grad_accum examples from one
// stream: epoch e visits every example once in an order drawn from (seed, e),
// and the stream is epoch 0's order, then epoch 1's, ... So what a step sees
// depends only on (seed, s), and a run resumed from a checkpoint at step s
// continues bit for bit as if it had never stopped (the checkpoint holds the
// factors, both AdamW moments and s).
//
//   step s:  micro-batch 0 .. grad_accum-1 (batch examples each, concatenated)
//            -> TrainStep::accumulate, every gradient scaled by 1 / (targets
//               counted over the whole step): the mean loss of the step
//            -> clip to grad_clip (global L2 norm) -> AdamW at lr(s)
//   lr(s):   linear warmup over `warmup` steps to lr, then cosine to lr * min_lr_ratio
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "train/lora_params.h"
#include "train/train_data.h"
#include "train/train_step.h"

namespace sluice {

struct TrainerOptions {
  int64_t steps = 0;        // optimizer steps; 0: epochs over the data
  double epochs = 1.0;
  int64_t batch = 4;        // examples per micro-batch
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  int64_t seq = 512;        // longest example (as the data was cut)
  float lr = 1e-4f;
  int64_t warmup = 0;
  float min_lr_ratio = 0.1f;
  float weight_decay = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float adam_eps = 1e-8f;
  float grad_clip = 1.0f;   // max global gradient norm (0: none)
  uint64_t seed = 0;
  bool keep_activations = false;  // TrainStepOptions::keep_activations
};

// What one optimizer step did, for progress lines.
struct TrainReport {
  int64_t step = 0;          // 1-based, the step just taken
  int64_t n_steps = 0;
  double loss = 0;           // mean over the step's counted targets
  float lr = 0;
  double grad_norm = 0;      // before clipping
  int64_t tokens = 0;        // input tokens of this step
  double seconds = 0;        // wall time of this step
  double tokens_per_s = 0;   // since the run (or resume) began
  double eta_s = 0;
};

class LoraTrainer {
 public:
  // Errors: options out of range (named), data with no example, a step
  // configuration TrainStep refuses.
  static StatusOr<std::unique_ptr<LoraTrainer>> create(Model& model, LoraParams& params, const TrainData& train,
                                                      const TrainerOptions& options);

  int64_t n_steps() const { return n_steps_; }
  int64_t step() const { return step_; }
  float lr_at(int64_t s) const;

  // One optimizer step. Errors: a non-finite loss or gradient (the factors
  // are left as they were before the step), a failing weight source.
  StatusOr<TrainReport> train_step();
  // Mean loss over `data`'s counted targets, forward only.
  StatusOr<double> mean_loss(const TrainData& data);

  // The factors, moments and step, with what must match to resume (the
  // options, the data's hash), as an adapter GGUF with the moments beside
  // (an adapter loader reads it as the adapter it holds). Atomic.
  Status save_checkpoint(const std::string& path) const;
  // Errors: a checkpoint of other options, data or adapter layout (named).
  Status load_checkpoint(const std::string& path);

 private:
  LoraTrainer(Model& model, LoraParams& params, const TrainData& train, const TrainerOptions& options);
  // Example index at position p of the stream.
  size_t example_at(int64_t p);
  void fill_batch(int64_t first, int64_t count, TrainBatch& b);

  Model& model_;
  LoraParams& params_;
  const TrainData& train_;
  TrainerOptions opt_;
  std::unique_ptr<TrainStep> step_fn_;
  int64_t n_steps_ = 0;
  int64_t step_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<float> grads_host_;  // the gradient read back where buffers are not host memory
  std::vector<size_t> order_;  // the current epoch's permutation
  TrainBatch batch_;
  double run_seconds_ = 0;
  int64_t run_tokens_ = 0;
};

}  // namespace sluice
