// ModelShape: the dimensions of a decoder-only transformer that the performance
// model needs, and the parameter count by tensor class.
//
// A shape comes from a named preset (the models the essays work through), from a
// GGUF file's metadata, or from an HF config.json. Dense and mixture-of-experts
// models share one struct: n_expert == 0 means dense; otherwise each MoE block has
// n_expert routed experts (n_expert_used per token) of width n_ff_expert, plus
// optional always-on shared experts of total width n_ff_shared, and the first
// n_layer_dense blocks keep a dense FFN of width n_ff.
//
// Parameter classes (what a weight format and a placement decision act on):
//   embedding  token_embd        [n_vocab, n_embd]
//   output     lm head           [n_vocab, n_embd]  (0 when tied to the embedding)
//   attention  q, k, v, o        n_embd x (n_embd_q + 2 n_embd_kv) + n_embd_q x n_embd
//   ffn        dense SwiGLU      3 n_embd n_ff  (+ shared experts in MoE blocks)
//   experts    routed experts    3 n_embd n_ff_expert x n_expert   (per MoE block)
//   router     gate              n_embd x n_expert                  (per MoE block)
//   norm       RMSNorm vectors   n_norm_layer n_embd per block + n_embd
//                                (+ 2 head_dim per block with per-head q/k norms)
//
// Sliding window: n_layer_swa of the blocks attend to the last n_swa positions
// only. When every block does, the engine keeps a sequence's KV for the window
// only (kv_plan.h kv_tokens_kept); with any global block it keeps every position.
// Plain values; all functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/metadata.h"
#include "format/model_file.h"
#include "sluice/status.h"

namespace sluice {
struct SynthShape;  // model/synth.h
}  // namespace sluice

namespace sluice::plan {

struct ModelShape {
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // 0: n_embd / n_head
  int64_t n_ff = 0;          // dense FFN width
  int64_t n_ctx_train = 0;
  bool tied_embeddings = false;  // no LM head: logits from token_embd (gemma)
  int64_t n_norm_layer = 2;      // RMSNorm vectors of n_embd per block (gemma2/3: 4, with post-norms)
  bool qk_norm = false;          // per-head RMSNorm of q and k (qwen3, gemma3)
  // Sliding-window attention (0: every block attends to every earlier position).
  int64_t n_swa = 0;             // window in positions
  int64_t n_layer_swa = 0;       // blocks that attend over the window only
  // Mixture of experts (all zero for a dense model).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;   // total width of the shared (always active) experts
  int64_t n_layer_dense = 0; // leading blocks with a dense FFN

  int64_t head_dim_or_default() const { return head_dim > 0 ? head_dim : (n_head > 0 ? n_embd / n_head : 0); }
  int64_t n_embd_q() const { return n_head * head_dim_or_default(); }
  int64_t n_embd_kv() const { return n_head_kv * head_dim_or_default(); }
  bool is_moe() const { return n_expert > 0; }
  int64_t n_layer_moe() const { return is_moe() ? n_layer - n_layer_dense : 0; }
  // The window every block attends over, or 0 when any block is global (the
  // engine's ModelHparams::kv_window()).
  int64_t kv_window() const { return n_swa > 0 && n_layer_swa == n_layer ? n_swa : 0; }
};

// Parameter counts by class (see the table above).
struct ParamCount {
  int64_t embedding = 0;
  int64_t output = 0;
  int64_t attention = 0;
  int64_t ffn = 0;           // dense FFNs and shared experts
  int64_t experts = 0;       // all routed experts
  int64_t experts_active = 0;// routed experts one token uses
  int64_t router = 0;
  int64_t norm = 0;

  // Everything stored.
  int64_t total() const { return embedding + output + attention + ffn + experts + router + norm; }
  // Weight matrices only (no norm vectors): the count the CS336 lecture uses.
  int64_t matrices() const { return total() - norm; }
  // Parameters one token multiplies with (embedding lookup excluded: it is a copy).
  int64_t active_matmul() const {
    return (output > 0 ? output : embedding) + attention + ffn + experts_active + router;
  }
  // Total with routed experts counted at their active share (the "active" figure
  // MoE model cards quote).
  int64_t active() const { return total() - experts + experts_active; }
};

// Validates a shape (positive sizes, heads dividing evenly, MoE fields coherent).
Status validate_shape(const ModelShape& shape);

ParamCount count_params(const ModelShape& shape);

// Named presets: llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, llama-3-70b,
// llama-3.1-405b (alias 405b), glm-4.7 (the MoE of the QLoRA streaming essay),
// mistral-7b (window 4096 on every block), gemma2-9b (window 4096 on half the
// blocks, tied embeddings), gemma3-4b (text; window 1024 on 5 of 6 blocks, tied).
// Those synth also writes (llama-3-8b: synth's 8b, llama-3-70b: its 70b-slice
// at 80 layers, mistral-7b, gemma2-9b, gemma3-4b) are synth_preset()'s shapes
// read through shape_from_synth(): one definition.
StatusOr<ModelShape> preset_shape(const std::string& name);
std::vector<std::string> preset_names();

// From GGUF-convention metadata ({arch}.embedding_length, ...; any architecture
// that uses those keys), read by the engine's own reader (model/hparams.h
// read_hparams), so the planner sees the values the model loads with. For an
// architecture sluice runs, its table (arch/arch_spec.h) adds what metadata
// does not say: the norms per block, q/k norms, which blocks are windowed, and
// tied embeddings where it has no LM head. An optional LM head counts as
// present (metadata cannot tell): shape_from_model_file() looks.
StatusOr<ModelShape> shape_from_metadata(const Metadata& md);
// shape_from_metadata() of the file's metadata, with tied embeddings when the
// file has no output.weight.
StatusOr<ModelShape> shape_from_model_file(const ModelFile& file);

// A synthetic model's shape (model/synth.h) as the planner reads the file
// synth writes: shape_from_metadata() of synth_metadata(), named as the shape
// (an optional LM head counts as present, as the architecture's table says).
StatusOr<ModelShape> shape_from_synth(const SynthShape& synth);

// From the text of an HF config.json, read as the HF loader reads it
// (format/hf_config.h, HfConfigUse::kPlan: any model_type, deepseek/glm-style
// MoE keys too) into the metadata shape_from_metadata() reads: the planner,
// the loader and the engine agree on every value. tie_word_embeddings
// defaults as the model type's config class does (true for gemma). `name`
// labels messages.
StatusOr<ModelShape> shape_from_hf_config(const std::string& json_text, const std::string& name);

// One line: "llama-3-70b: 80 layers, dim 8192, 64 heads (8 KV), ffn 28672, vocab 128256".
std::string shape_summary(const ModelShape& shape);

}  // namespace sluice::plan
