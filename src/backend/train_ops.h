// TrainOps: the operators a training step adds to a Backend's forward ones.
//
// Fine-tuning (LoRA over frozen base weights, train/) runs a layer forward
// over whole sequences held in plain rows (no KV cache), then the backward
// through the same layer. The frozen matrices are multiplied with the
// Backend's own matmul going forward (or with forward_matmul, a product over
// the micro-batch, where the backend has a faster one) and with matmul_t going
// back; the adapters' factors are trained, the base never changes. A backend that can
// train returns its TrainOps from Backend::train_ops(); the reference backend's
// plain loops are the yardstick every other implementation is tested against
// (the op-case list), and a whole training step on them reproduces the
// PyTorch reference of ../shared/models/stories260K-lora.
//
// Contracts:
//   - Pointers are into the backend's buffers (Backend::alloc), or host memory
//     for a host-visible backend; shapes are in the argument structs.
//   - Outputs marked "(+=)" accumulate into what the caller zeroed or
//     summed before; the others are overwritten.
//   - Per-row operators (everything but the adapter gradients and attention's
//     keys and values) keep the forward contract: row t of an output depends
//     only on row t of the inputs. Sums over tokens (dA, dB, dK, dV) are taken
//     in a fixed order that does not depend on thread timing, so a training run
//     repeats bit for bit with the same thread count.
//   - Calls come from one thread; operators return when their outputs are
//     written and allocate nothing per call past what reserve() sized.
#pragma once

#include <cstdint>
#include <span>

#include "backend/op_types.h"
#include "base/check.h"

namespace sluice {

// y[t] = W x[t] for a micro-batch: the frozen matrix's product going forward,
// where the backend multiplies many rows faster than through its matmul. Row
// t depends only on row t (and not on n_tok), in a fixed order of sums that
// may differ from Backend::matmul's.  w: [n_out, n_in], a type and layout
// supports_forward_matmul() accepts.
struct ForwardMatmulArgs {
  WeightView w;
  const float* x = nullptr;  // [n_tok, w.n_in]
  float* y = nullptr;        // [n_tok, w.n_out]
  int64_t n_tok = 0;
};

// dx[t] = W^T dy[t] (or += with accumulate): the input gradient of y = W x
// through a frozen matrix.  w: [n_out, n_in] in any type and layout the
// backend's matmul takes for it.
struct MatmulTArgs {
  WeightView w;
  const float* dy = nullptr;  // [n_tok, w.n_out]
  float* dx = nullptr;        // [n_tok, w.n_in]
  int64_t n_tok = 0;
  bool accumulate = false;
};

// The input gradient of y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w (w frozen):
//   r = 1 / sqrt(mean(x^2) + eps),  g = dy * w
//   dx = r * g - x * r^3 * mean(g * x)        (+= into dx)
struct RmsNormBackArgs {
  const float* x = nullptr;   // [n_tok, n]
  const float* w = nullptr;   // [n]
  const float* dy = nullptr;  // [n_tok, n]
  float* dx = nullptr;        // [n_tok, n] (+=)
  int64_t n_tok = 0;
  int64_t n = 0;
  float eps = 1e-5f;
};

// RoPE on plain rows: every head of x[t] rotated on its first n_rot dims at
// cos_sin[t] (Backend::rope_tables), pairs as `layout` says; with inverse,
// by the opposite angle, which is the backward of the rotation.
struct RopeArgs {
  float* x = nullptr;              // [n_tok, n_head * head_dim] in place
  const float* cos_sin = nullptr;  // [n_tok, n_rot / 2, 2]
  int64_t n_tok = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  RopeLayout layout = RopeLayout::kAdjacent;
  bool inverse = false;
};

// x[t] += v for every row t: a frozen bias (qwen2's q/k/v) on a whole
// micro-batch in one call.
struct AddRowsArgs {
  float* x = nullptr;        // [n_tok, n] in place
  const float* v = nullptr;  // [n]
  int64_t n_tok = 0;
  int64_t n = 0;
};

// h[t] = act(g[t]) * u[t]  (SiLU or tanh-approximated GELU, as the forward's glu_matmul).
struct GluArgs {
  const float* g = nullptr;  // [n_tok, n_ff]
  const float* u = nullptr;  // [n_tok, n_ff]
  float* h = nullptr;        // [n_tok, n_ff]
  int64_t n_tok = 0;
  int64_t n_ff = 0;
  Activation act = Activation::kSilu;
};

// The backward of GluArgs: dg = dh * u * act'(g), du = dh * act(g).
struct GluBackArgs {
  const float* g = nullptr;   // [n_tok, n_ff]
  const float* u = nullptr;   // [n_tok, n_ff]
  const float* dh = nullptr;  // [n_tok, n_ff]
  float* dg = nullptr;        // [n_tok, n_ff]
  float* du = nullptr;        // [n_tok, n_ff]
  int64_t n_tok = 0;
  int64_t n_ff = 0;
  Activation act = Activation::kSilu;
};

// A whole sequence's rows in a training attention call: rows tok0 .. tok0 +
// n_tok - 1 of q, k, v and out, at positions 0 .. n_tok - 1.
struct TrainSeq {
  int64_t tok0 = 0;
  int64_t n_tok = 0;
};

// Causal grouped-query attention within each sequence (query head j reads
// kv head j / (n_head / n_head_kv)); scores s = scale * q . k, soft-capped
// as AttentionArgs says, over positions max(0, P - window + 1) .. P.
//   out[t] = softmax(s) v,  lse[t][h] = log(sum exp(s)) (kept for the backward)
struct TrainAttentionArgs {
  const float* q = nullptr;  // [n_tok, n_head * head_dim]
  const float* k = nullptr;  // [n_tok, n_head_kv * head_dim]
  const float* v = nullptr;  // [n_tok, n_head_kv * head_dim]
  float* out = nullptr;      // [n_tok, n_head * head_dim]
  float* lse = nullptr;      // [n_tok, n_head]
  std::span<const TrainSeq> seqs;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;
  float softcap = 0.0f;
};

// The backward of TrainAttentionArgs from the forward's inputs, out and lse:
// dq, dk, dv written (dk and dv sum over the query heads sharing a kv head
// and over the queries that read each position).
struct TrainAttentionBackArgs {
  TrainAttentionArgs fwd;      // q, k, v, out, lse as the forward left them
  const float* dout = nullptr; // [n_tok, n_head * head_dim]
  float* dq = nullptr;         // [n_tok, n_head * head_dim]
  float* dk = nullptr;         // [n_tok, n_head_kv * head_dim]
  float* dv = nullptr;         // [n_tok, n_head_kv * head_dim]
};

// Next-token cross-entropy over rows of logits, in place:
//   row t with target[t] >= 0: loss[t] = logsumexp(z[t]) - z[t][target[t]],
//                              z[t] becomes (softmax(z[t]) - onehot(target[t])) * grad_scale
//   row t with target[t] < 0:  loss[t] = 0, z[t] becomes 0
// Sums in double inside a row, so the loss does not drift with n_vocab.
struct CrossEntropyArgs {
  float* logits = nullptr;          // [n_tok, n_vocab] in: logits; out: their gradient
  const int32_t* targets = nullptr; // [n_tok] host memory
  double* loss = nullptr;           // [n_tok] host memory
  int64_t n_tok = 0;
  int64_t n_vocab = 0;
  float grad_scale = 1.0f;          // d(total loss)/d(row loss): 1 / tokens counted, say
  // loss[] is written by the next finish_losses() instead of on return, so a
  // device backend need not wait for its kernels here (targets are read on
  // the call; loss stays the caller's until then).
  bool deferred = false;
};

// Gradients of an adapted matmul's low-rank term, y[t] += scale * B u[t],
// u[t] = A x[t] (u as Backend::lora saved it):
//   du[t] = scale * B^T dy[t]
//   dB += scale * sum_t dy[t] u[t]^T,   dA += sum_t du[t] x[t]^T,   dx[t] += A^T du[t]
struct LoraBackArgs {
  const float* x = nullptr;   // [n_tok, n_in]
  const float* u = nullptr;   // [n_tok, rank]
  const float* dy = nullptr;  // [n_tok, n_out]
  const float* a = nullptr;   // [rank, n_in]
  const float* b = nullptr;   // [n_out, rank]
  float* da = nullptr;        // [rank, n_in] (+=)
  float* db = nullptr;        // [n_out, rank] (+=)
  float* dx = nullptr;        // [n_tok, n_in] (+=), or null when x needs no gradient
  int64_t n_tok = 0;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t rank = 0;
  float scale = 1.0f;
};

// One AdamW update of n parameters (torch.optim.AdamW's formula), step t >= 1:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr * wd * p (decoupled);
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
struct AdamWArgs {
  float* p = nullptr;        // [n]
  const float* g = nullptr;  // [n]
  float* m = nullptr;        // [n]
  float* v = nullptr;        // [n]
  int64_t n = 0;
  int64_t step = 1;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// The routed FFN in training (train/routed_ffn_train.h) works on its
// (token, slot) pairs grouped by expert: n_tok tokens of k slots each become
// n_tok * k rows, row[t * k + j] the grouped row of slot j of token t (a
// permutation of 0 .. n_tok * k - 1). Index and routing-weight arrays are
// host memory (the host grouped them), as cross_entropy's targets are.

// dst[r] = src[idx[r]] for r < n_rows: the grouped rows' inputs.
struct GatherRowsArgs {
  const float* src = nullptr;    // [.., n]
  const int32_t* idx = nullptr;  // [n_rows] host memory, each a row of src
  float* dst = nullptr;          // [n_rows, n]
  int64_t n_rows = 0;
  int64_t n = 0;
};

// out[t] = sum over j < k, in slot order, of w[t][j] * y[row[t * k + j]]
// (float products and sums; w null: weights of 1): the routed output from
// the grouped rows, and the backward's input gradient from theirs.
struct SlotSumArgs {
  const float* y = nullptr;      // [n_tok * k, n] grouped rows
  const int32_t* row = nullptr;  // [n_tok * k] host memory
  const float* w = nullptr;      // [n_tok * k] host memory, or null
  float* out = nullptr;          // [n_tok, n]
  int64_t n_tok = 0;
  int64_t k = 0;
  int64_t n = 0;
};

// The backward of SlotSumArgs (w set) from dout:
//   dw[t][j] = dout[t] . y[row[t * k + j]]   (a double sum: the routing weights' gradient)
//   dy[row[t * k + j]] = w[t][j] * dout[t]
struct SlotSumBackArgs {
  SlotSumArgs fwd;              // y, row, w and the shape as the forward had them (out unused)
  const float* dout = nullptr;  // [n_tok, n]
  float* dy = nullptr;          // [n_tok * k, n]
  float* dw = nullptr;          // [n_tok * k] host memory, written on return
};

// out[t] += s[t] * y[t],  s[t] = sigmoid(gate . x[t]) (gate null: 1; as the
// forward's expert_ffn weighs its shared expert, Backend's shared_gate_weight),
// s kept for the backward: a shared expert's output under its gate.
struct GatedAddArgs {
  const float* x = nullptr;     // [n_tok, n]
  const float* gate = nullptr;  // [n] (a frozen vector), or null
  const float* y = nullptr;     // [n_tok, n]
  float* out = nullptr;         // [n_tok, n] (+=)
  float* s = nullptr;           // [n_tok] (written)
  int64_t n_tok = 0;
  int64_t n = 0;
};

// The backward of GatedAddArgs from dout:
//   dy[t] = s[t] * dout[t];  with a gate, dx[t] += (dout[t] . y[t]) s[t] (1 - s[t]) gate
struct GatedAddBackArgs {
  GatedAddArgs fwd;             // gate, y, s and the shape as the forward left them (x, out unused)
  const float* dout = nullptr;  // [n_tok, n]
  float* dy = nullptr;          // [n_tok, n]
  float* dx = nullptr;          // [n_tok, n] (+=), with a gate
};

// What a training step's scratch needs, for reserve().
struct TrainScratchNeeds {
  int64_t n_tok = 0;     // tokens per call
  int64_t n_ctx = 0;     // longest sequence
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_in_max = 0;  // widest matrix input
};

class TrainOps {
 public:
  virtual ~TrainOps() = default;
  // Whether matmul_t runs on this matrix type and layout.
  virtual bool supports_matmul_t(DType type, WeightLayout layout) const = 0;
  // Whether matmul_t of n_tok tokens through weights of this type may round
  // dy and the weights to BF16 (a tensor-core path, as the forward's matmul
  // of as many tokens rounds x; a shape it cannot take rounds nothing).
  // Default: it rounds nothing.
  virtual bool matmul_t_rounds_to_bf16(DType type, int64_t n_tok) const { return false; }
  // Whether forward_matmul runs on this matrix type and layout; where it does
  // not, a training step multiplies going forward through the Backend's
  // matmul. Default: it never does.
  virtual bool supports_forward_matmul(DType type, WeightLayout layout) const { return false; }
  virtual void reserve(const TrainScratchNeeds& needs) = 0;

  virtual void forward_matmul(const ForwardMatmulArgs&) {
    CHECK(false && "forward_matmul on a type supports_forward_matmul() refused");
  }
  virtual void matmul_t(const MatmulTArgs& a) = 0;
  virtual void rmsnorm_backward(const RmsNormBackArgs& a) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void add_rows(const AddRowsArgs& a) = 0;
  virtual void glu(const GluArgs& a) = 0;
  virtual void glu_backward(const GluBackArgs& a) = 0;
  virtual void attention(const TrainAttentionArgs& a) = 0;
  virtual void attention_backward(const TrainAttentionBackArgs& a) = 0;
  virtual void cross_entropy(const CrossEntropyArgs& a) = 0;
  // Writes the losses of the deferred cross_entropy calls since the last
  // finish_losses(), waiting for them. Default: they were written on return.
  virtual void finish_losses() {}
  virtual void lora_backward(const LoraBackArgs& a) = 0;
  virtual void adamw(const AdamWArgs& a) = 0;
  virtual void gather_rows(const GatherRowsArgs& a) = 0;
  virtual void slot_sum(const SlotSumArgs& a) = 0;
  virtual void slot_sum_backward(const SlotSumBackArgs& a) = 0;
  virtual void gated_add(const GatedAddArgs& a) = 0;
  virtual void gated_add_backward(const GatedAddBackArgs& a) = 0;
};

}  // namespace sluice
