// ModelHparams: the hyper-parameters of a decoder, read from GGUF-convention
// metadata ("{arch}.embedding_length", ...). Names follow GGUF.
//
// read_hparams() reads the keys of any architecture that uses the GGUF
// conventions (the planner reads models it cannot run); hparams_from_metadata()
// also requires an ArchSpec (arch/arch_spec.h) for the architecture and the
// values that spec needs, so a model that loads is one the decoder can run.
#pragma once

#include <cstdint>
#include <string>

#include "arch/arch_spec.h"
#include "format/metadata.h"
#include "sluice/status.h"

namespace sluice {

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct ModelHparams {
  std::string arch;                // general.architecture
  const ArchSpec* spec = nullptr;  // its table; null from read_hparams() for unknown architectures
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // {arch}.context_length
  int64_t n_embd = 0;        // {arch}.embedding_length
  int64_t n_layer = 0;       // {arch}.block_count
  int64_t n_ff = 0;          // {arch}.feed_forward_length (dense FFN)
  int64_t n_head = 0;        // {arch}.attention.head_count
  int64_t n_head_kv = 0;     // {arch}.attention.head_count_kv
  int64_t head_dim = 0;      // {arch}.attention.key_length, or n_embd / n_head
  int64_t n_rot = 0;         // {arch}.rope.dimension_count, or head_dim
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;
  RopeLayout rope_layout = RopeLayout::kAdjacent;  // from the spec
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale_factor = 1.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  // {arch}.rope.scaling.original_context_length: the context the model was
  // trained at before its RoPE was stretched (llama3: default 8192; otherwise
  // n_ctx_train). LongRoPE picks its factors by it (model/rope_scaling.h).
  int64_t rope_orig_ctx = 8192;
  float rope_attn_factor = 1.0f;  // {arch}.rope.scaling.attn_factor: RoPE's cos and sin times this
  // Mixture of experts (all 0 for a dense model).
  int64_t n_expert = 0;         // {arch}.expert_count
  int64_t n_expert_used = 0;    // {arch}.expert_used_count
  int64_t n_ff_expert = 0;      // {arch}.expert_feed_forward_length, or n_ff
  int64_t n_ff_shared = 0;      // shared experts' total width: expert_shared_count x expert_shared_feed_forward_length
  int64_t n_layer_dense = 0;    // {arch}.leading_dense_block_count
  bool expert_weights_norm = true;  // top-k weights renormalized ({arch}.expert_weights_norm, else the spec)
  // Sliding-window attention (n_swa 0: every layer attends to every earlier position).
  // A windowed layer's query at position P attends to positions P - n_swa + 1 .. P.
  int64_t n_swa = 0;        // {arch}.attention.sliding_window
  int64_t swa_pattern = 1;  // with n_swa > 0: layer l is windowed when l % swa_pattern < swa_pattern - 1
                            // (1: every layer; gemma2: 2, even layers; from the spec)
  float rope_freq_base_swa = 0.0f;  // windowed layers' RoPE base, unscaled (gemma3: 10000); 0: as the others
  // Attention: scores = attn_scale * q.k, then soft-capped when attn_softcap > 0.
  float attn_scale = 0.0f;     // 1/sqrt({arch}.attention.query_pre_attn_scalar), else 1/sqrt(head_dim)
                               // (gemma 27B: 1/sqrt(n_embd / n_head), as llama.cpp)
  float attn_softcap = 0.0f;   // cap * tanh(score / cap) ({arch}.attn_logit_softcapping; gemma2: 50)
  float final_softcap = 0.0f;  // the same on the output logits ({arch}.final_logit_softcapping; gemma2: 30)
  float embd_scale = 1.0f;     // embeddings times this (gemma: sqrt(n_embd))

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
  bool is_moe() const { return n_expert > 0; }
  // Whether layer l's FFN is routed.
  bool layer_is_moe(int64_t l) const { return is_moe() && l >= n_layer_dense; }
  // Whether layer l rotates with rope_freq_base_swa, unscaled, instead of the model's RoPE.
  bool layer_has_own_rope(int64_t l) const { return rope_freq_base_swa > 0.0f && layer_is_swa(l); }
  // Whether layer l attends over a window of n_swa positions only.
  bool layer_is_swa(int64_t l) const {
    return n_swa > 0 && (swa_pattern <= 1 || l % swa_pattern < swa_pattern - 1);
  }
  // The window of every layer (0 when any layer attends to all positions): a
  // query at position P or later reads no K/V before P - kv_window() + 1, so the
  // KV blocks wholly before it can be freed.
  int64_t kv_window() const { return n_swa > 0 && swa_pattern <= 1 ? n_swa : 0; }
  // The size a symbolic dimension stands for (kNone: 1).
  int64_t dim(Dim d) const;
};

// Reads hyper-parameters under the GGUF conventions for any architecture;
// missing or inconsistent values name the key. n_vocab comes from the
// tokenizer token list or {arch}.vocab_size (the caller fills it if 0).
StatusOr<ModelHparams> read_hparams(const Metadata& md);

// read_hparams() for an architecture sluice runs: unsupported architectures
// are refused by name (kUnimplemented, with the reason where one is known and
// the supported list).
StatusOr<ModelHparams> hparams_from_metadata(const Metadata& md);

// One line, for `sluice info` and the load summary.
std::string hparams_summary(const ModelHparams& hp);

}  // namespace sluice
