// HF config.json -> GGUF-convention hyper-parameter metadata.
//
// Translates the Hugging Face transformers config of a supported architecture
// into the keys a GGUF file of the same model would carry, with the exact GGUF
// value types (u32 counts and lengths, f32 floats, strings):
//
//   model_type -> general.architecture as the ArchSpec tables say
//   (arch/arch_spec.h: llama, mistral -> "llama" with q/k un-permuted;
//   qwen2 -> "qwen2"; ...)
//
//   max_position_embeddings -> {arch}.context_length
//   hidden_size             -> {arch}.embedding_length
//   num_hidden_layers       -> {arch}.block_count
//   intermediate_size       -> {arch}.feed_forward_length
//   num_attention_heads     -> {arch}.attention.head_count
//   num_key_value_heads     -> {arch}.attention.head_count_kv (default: head_count)
//   rms_norm_eps            -> {arch}.attention.layer_norm_rms_epsilon
//   rope_theta              -> {arch}.rope.freq_base (default 10000)
//   head_dim | hidden/heads -> {arch}.rope.dimension_count (+ key/value_length if given)
//   vocab_size              -> {arch}.vocab_size
//   rope_scaling            -> {arch}.rope.scaling.* (linear, llama3; longrope/su for phi3:
//                              original_max_position_embeddings -> original_context_length,
//                              the magnitude -> attn_factor, the factor lists -> the
//                              rope_factors_{long,short} fields below)
//   sliding_window          -> {arch}.attention.sliding_window (mistral, llama; null: none)
//   num_local_experts | num_experts, num_experts_per_tok, moe_intermediate_size,
//   shared_expert_intermediate_size, norm_topk_prob
//                           -> {arch}.expert_count, expert_used_count,
//                              expert_feed_forward_length,
//                              expert_shared_feed_forward_length, expert_weights_norm
//   sliding_window, attn_logit_softcapping, final_logit_softcapping,
//   query_pre_attn_scalar, rope_local_base_freq, partial_rotary_factor
//                           -> {arch}.attention.sliding_window, {arch}.attn_logit_softcapping,
//                              {arch}.final_logit_softcapping,
//                              {arch}.attention.query_pre_attn_scalar,
//                              {arch}.rope.freq_base_swa, {arch}.rope.dimension_count
//                              (gemma2, gemma3_text, phi3; a window pattern other than the
//                              architecture's is refused)
//   n_routed_experts, n_shared_experts, first_k_dense_replace (DeepSeek/GLM-style)
//                           -> {arch}.expert_count, expert_shared_count,
//                              leading_dense_block_count
// The one reader of config.json: the HF loader (format/safetensors) and the
// planner (plan/model_shape, through model/hparams.h read_hparams) both read
// what it writes.
// Pure function of its input; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch_spec.h"
#include "format/metadata.h"
#include "sluice/status.h"

namespace sluice {

// What a config is read for. kLoad: a model to run (a supported model_type and
// every field the loader needs). kPlan: a shape to plan: any model_type (one
// without an ArchSpec keeps the generic keys under its own name, a sliding
// window on every layer), the context length and FFN width may be absent,
// rope_scaling is not read, and a multimodal config's text_config is.
enum class HfConfigUse { kLoad, kPlan };

struct HfConfig {
  std::string model_type;      // as written in config.json
  std::string arch;            // GGUF architecture name
  const ArchSpec* spec = nullptr;  // its table (tensor names); null only for kPlan's unknown types
  bool permute_qk = false;     // q/k rows must be un-permuted (llama family)
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  bool tie_word_embeddings = false;
  Metadata metadata;           // general.architecture, general.name, {arch}.*
  // LongRoPE divisors from rope_scaling.long_factor / short_factor, [n_rot / 2]
  // each, or empty: the importer adds them as rope_factors_{long,short}.weight.
  std::vector<float> rope_factors_long;
  std::vector<float> rope_factors_short;
};

// Parses config.json text. `name` (the file, for messages) and `model_name`
// (general.name). Unknown model_type -> kUnimplemented naming it; missing or
// malformed fields -> kDataLoss naming the field.
StatusOr<HfConfig> parse_hf_config(const std::string& json_text, const std::string& name,
                                   const std::string& model_name, HfConfigUse use = HfConfigUse::kLoad);

}  // namespace sluice
