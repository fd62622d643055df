// TrainStep: the forward and backward of a LoRA-adapted model over one
// micro-batch of whole sequences, layer by layer, with the frozen base read
// through the model (resident or streamed by its weight source).
//
// Memory is bounded by recomputation: the forward keeps only each layer's
// input (the residual stream, n_layer + 1 rows of [n_tok, n_embd]); the
// backward reruns one layer's forward from its input to get the
// intermediates, then takes that layer's gradients, last layer first.
// With keep_activations the forward keeps every dense layer's intermediates
// instead (kept_activation_bytes() more memory) and the backward skips the
// rerun: a third fewer matrix products a step and the same bits (the rerun
// computes what the forward did). A routed layer is always rerun (its
// routing's intermediates are one layer's).
//
//   forward   x_0 = embed(tokens) -> layer 0 -> x_1 -> ... -> x_L       (keep x_l)
//   loss      logits = W_out norm(x_L), chunk by chunk -> cross-entropy -> dx_L
//   backward  for l = L-1 .. 0: recompute layer l from x_l; dx_l from dx_{l+1};
//             the adapters' dA, dB of layer l added to the gradients
//
// The frozen weights are asked for in forward order, then in reverse for the
// backward: each pass first tells the model's weight source its order
// (training_schedule(), or forward_schedule() for evaluate()), so a source
// that streams them prefetches the backward's layers too.
// Per layer, where Wq etc. are the frozen matrices and + lora the low-rank terms:
//
//   n1 = rmsnorm(x) * attn_norm;  q, k, v = W{q,k,v} n1 + lora (+ bias);  RoPE(q, k)
//   att = causal softmax(q k^T * scale) v;  m = x + Wo att + lora
//   n2 = rmsnorm(m) * ffn_norm;  g, u = W{gate,up} n2 + lora;  h = act(g) * u
//   x' = m + Wdown h + lora
//
// or in a routed (mixture-of-experts) layer x' = m + the routed FFN of n2,
// through the chosen experts and the router, all frozen (routed_ffn_train.h).
//
// On a backend that is not host-visible (CUDA) every buffer is device memory:
// the norm and bias vectors (host memory in the model) get a copy in a
// buffer on first use, and rows move between buffers with write_floats.
// Not thread-safe; one step at a time per model.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/train_ops.h"
#include "model/model.h"
#include "train/lora_params.h"
#include "train/routed_ffn_train.h"

namespace sluice {

// One micro-batch: whole sequences, concatenated.
struct TrainBatch {
  std::vector<int32_t> tokens;   // [n_tok]
  std::vector<int32_t> targets;  // [n_tok] the token each position predicts, or -1 (not in the loss)
  std::vector<TrainSeq> seqs;    // each sequence's rows, in order, covering 0 .. n_tok - 1
  // Positions whose target counts.
  int64_t n_counted() const;
};

struct TrainStepOptions {
  int64_t max_tokens = 512;  // most tokens in a micro-batch (sizes every buffer)
  int64_t max_seq = 512;     // longest sequence
  bool keep_activations = false;  // keep each dense layer's intermediates instead of rerunning its forward
};

// Why this model cannot be trained (features the training forward lacks), or OK.
Status check_trainable(const Model& model);

class TrainStep {
 public:
  // Errors: a model check_trainable refuses, a backend without training
  // operators or whose matmul_t lacks a matrix's type, params adapting a
  // matrix the training forward does not (only q, k, v, o, gate, up, down).
  static StatusOr<std::unique_ptr<TrainStep>> create(Model& model, LoraParams& params,
                                                     const TrainStepOptions& options);
  ~TrainStep();

  // Forward and backward over `batch`: adds grad_scale x d(sum of counted
  // losses)/d(params) to the params' gradients; returns that sum of losses.
  StatusOr<double> accumulate(const TrainBatch& batch, float grad_scale);
  // The forward alone: the sum of counted losses (held-out evaluation).
  StatusOr<double> evaluate(const TrainBatch& batch);

  // The bytes keep_activations adds: the intermediates of every layer but
  // one, at max_tokens tokens and adapters of up to max_rank.
  static uint64_t kept_activation_bytes(const ModelHparams& h, int64_t max_tokens, int64_t max_rank);
  // Floats of one layer's set of intermediates (acts()).
  static int64_t act_set_floats(const ModelHparams& h, int64_t max_tokens, int64_t max_rank);

 private:
  TrainStep(Model& model, LoraParams& params, const TrainStepOptions& options);
  void plan_buffers();
  Status check_batch(const TrainBatch& batch) const;
  StatusOr<double> run(const TrainBatch& batch, float grad_scale, bool backward);
  // Layer l from x_in: the intermediates into the step's buffers, and
  // x_out = the layer's output when x_out is set. Errors: a routed layer's
  // experts' (the weight source's).
  Status layer_forward(int64_t l, const LayerWeights& w, const float* x_in, float* x_out, int64_t n);
  // The nearest routed layer below l (the next the backward visits), or -1.
  int64_t routed_below(int64_t l) const;
  // dx: in dL/d(layer output), out dL/d(layer input); the adapters' gradients added.
  void layer_backward(int64_t l, const LayerWeights& w, const float* x_in, float* dx, int64_t n);
  // y += lora(x) for the slot adapting (l, role), keeping A x in u (when any).
  // One layer's intermediates: its own with keep_activations, else the one set.
  struct Acts {
    float *n1, *m, *n2, *q, *att, *k, *v, *lse, *g, *u, *h, *lora_u;
  };
  Acts acts(int64_t l) const;
  void lora_forward(int64_t l, TensorRole role, const float* x, float* y, int64_t n_in, int64_t n_out, int64_t n);
  // The slot's gradients from dy; dx += its input gradient.
  void lora_backward(int64_t l, TensorRole role, const float* x, const float* dy, float* dx, int64_t n);
  float* u_of(int64_t l, TensorRole role);
  // host (a model vector of n floats) as the operators read it: itself on a
  // host-visible backend, else its copy in a buffer (made on first use).
  const float* vec(const float* host, int64_t n);
  // dst = 0, n floats of a buffer.
  void zero(float* dst, int64_t n);
  // The per-token losses over x_L's rows (deferred: loss_sum reads them), and
  // with backward dx_L.
  void loss_and_top_grad(const TrainBatch& batch, float grad_scale, bool backward, int64_t n);
  // The sum of the n per-token losses, once the backend has written them.
  double loss_sum(int64_t n);

  Model& model_;
  LoraParams& params_;
  TrainStepOptions opt_;
  Backend& be_;
  TrainOps& ops_;
  int64_t logits_chunk_ = 0;

  // Buffers of the backend, [max_tokens, ...] unless said.
  int64_t n_sets_ = 1;                           // n_layer with keep_activations, else 1
  std::unique_ptr<Buffer> xs_;       // [n_layer + 1, max_tokens, n_embd] each layer's input, then x_L
  // [n_sets_ x act_set_floats] each set Acts' buffers one after another:
  // n1, m, n2 [., n_embd]; q, att [., n_embd_q]; k, v [., n_embd_kv];
  // lse [., n_head]; g, u, h [., n_ff]; lora_u [7, ., max_rank] (A x of each adapted matrix)
  std::unique_ptr<Buffer> acts_;
  std::unique_ptr<Buffer> proj_;                 // [., n_embd] scratch (also the loss head's normed rows)
  std::unique_ptr<Buffer> dx_, dn_;              // [., n_embd]
  std::unique_ptr<Buffer> dq_, datt_;            // [., n_embd_q]
  std::unique_ptr<Buffer> dk_, dv_;              // [., n_embd_kv]
  std::unique_ptr<Buffer> dh_, dg_, du_;         // [., n_ff]
  std::unique_ptr<Buffer> cos_sin_;              // [., n_rot]
  std::unique_ptr<Buffer> logits_;               // [logits_chunk, n_vocab]
  std::vector<int64_t> positions_;               // [max_tokens]
  std::vector<double> loss_;                     // [max_tokens]
  std::vector<TrainSeq> seqs_;
  std::unordered_map<const float*, std::unique_ptr<Buffer>> vecs_;  // vec()'s copies, by host vector
  std::unique_ptr<Buffer> zeros_;                // [T, n_embd] zeros: zero()'s source where buffers are not host memory
  std::vector<int64_t> forward_order_, train_order_;  // the weight source's schedules
  std::unique_ptr<RoutedFfnTrain> routed_;       // a routed model's FFN (null: dense)
};

}  // namespace sluice
