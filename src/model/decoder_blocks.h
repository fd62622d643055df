// The builders of one decoder layer. Each adds its block's output to the
// residual stream x through Backend operators, reading the layer's weights by
// role and the architecture's flags from the hyper-parameters' spec:
//
//   attention_block   n = norm(x) -> [q k v] = n W{q,k,v} -> bias, RoPE, K/V rows
//                     into the store -> paged attention (scale, window and
//                     soft-cap from the hyper-parameters) -> x += post(att Wo)
//   dense_ffn_block   n = norm(x) -> [g u] = n W{gate,up} -> h = act(g) * u
//                     -> x += post(h Wdown)
//   (post: the block's post-norm where the layer has one (gemma), else nothing;
//    fused q/k/v and gate/up matrices arrive as their parts' row slices)
//   LoRA: each adapted matmul's low-rank terms are added to its output right
//   after it (ModelAdapters::apply): q/k/v before bias, RoPE and the K/V
//   store; o before the post-norm and the residual add; gate/up before the
//   activation; down from h, which glu_matmul leaves in the gate buffer.
//   moe_ffn_block     n = norm(x) -> router logits = n Wrouter -> top-k of the
//                     softmax (renormalized as the spec says) -> x += sum of
//                     the selected experts' FFNs, weighted (+ the gated shared
//                     expert), tokens grouped by expert by the backend
//
// Builders only sequence operators; they allocate nothing and hold no state.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "backend/backend.h"
#include "base/function_ref.h"
#include "model/hparams.h"
#include "model/model_adapters.h"
#include "model/model_weights.h"
#include "model/op_profile.h"

namespace sluice {

// Called (when set) with each named activation of a forward chunk, so a pass can
// be dumped and diffed layer by layer. layer = -1 outside the blocks.
//   data: [n_tokens, n]
using ActivationHook =
    std::function<void(std::string_view name, int64_t layer, const float* data, int64_t n_tokens, int64_t n)>;

// Names an activation for the debug hook: (name, layer, data [n_tok, n], n_tok, n).
using EmitFn = FunctionRef<void(std::string_view, int64_t, const float*, int64_t, int64_t)>;

// One layer of one step: where everything is.
struct LayerStep {
  Backend& be;
  const ModelHparams& hp;
  const LayerWeights& w;
  int64_t layer = 0;
  int64_t n_tok = 0;
  // Activations, [n_tok, ...] rows of the backend's buffers.
  float* x;        // [n_tok, n_embd] residual stream
  float* xn;       // [n_tok, n_embd]
  float* q;        // [n_tok, n_embd_q]
  float* k;        // [n_tok, n_embd_kv]
  float* v;        // [n_tok, n_embd_kv]
  float* att;      // [n_tok, n_embd_q]
  float* proj;     // [n_tok, n_embd]
  float* gate;     // [n_tok, n_ff]
  float* up;       // [n_tok, n_ff]
  const float* cos_sin;  // [n_tok, n_rot / 2, 2] this layer's (gemma3's windowed layers have their own)
  // The step's sequences (queries point into q, outputs into att).
  std::span<const AttentionSeq> seqs;
  KvStore& kv;
  const int64_t* kv_rows;  // [n_tok]
  EmitFn emit;
  ModelAdapters* lora = nullptr;  // the step's LoRA adapters (planned), or null: none this step
  OpProfile* profile = nullptr;   // marks each operator's end (model/op_profile.h), or null
};

// Where a routed layer's routing goes.
struct MoeStep {
  float* router;    // [n_tok, n_expert] router logits (backend buffer)
  int32_t* ids;     // [n_tok, n_used] host memory
  float* weights;   // [n_tok, n_used] host memory
  std::span<const ExpertWeights> experts;  // [n_expert] the layer's, with data for every selected one
  const FunctionRef<int64_t()>* next = nullptr;  // ExpertFfnArgs::next (experts streamed from disk)
};

void attention_block(const LayerStep& s);
void dense_ffn_block(const LayerStep& s);
// Routes the step's tokens (norm + router + top-k); the caller then makes the
// selected experts' bytes available (a weight store may fetch them) and runs
// moe_experts() with the same MoeStep.
void moe_route(const LayerStep& s, const MoeStep& m);
void moe_experts(const LayerStep& s, const MoeStep& m);
// Both in one (Backend::routed_ffn), for experts that need nothing of the
// host: a device backend may route without waiting. m.ids and m.weights are
// written by the backend's next wait_idle() (or logits()), not on return;
// m.next must be null.
void moe_routed(const LayerStep& s, const MoeStep& m);

}  // namespace sluice
