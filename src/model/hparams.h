// ModelHparams: the hyper-parameters of a llama-family decoder, read from
// GGUF-convention metadata ("{arch}.embedding_length", ...). Names follow GGUF.
#pragma once

#include <cstdint>
#include <string>

#include "format/metadata.h"
#include "sluice/status.h"

namespace sluice {

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct ModelHparams {
  std::string arch;          // "llama" or "qwen2"
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;   // {arch}.context_length
  int64_t n_embd = 0;        // {arch}.embedding_length
  int64_t n_layer = 0;       // {arch}.block_count
  int64_t n_ff = 0;          // {arch}.feed_forward_length
  int64_t n_head = 0;        // {arch}.attention.head_count
  int64_t n_head_kv = 0;     // {arch}.attention.head_count_kv
  int64_t head_dim = 0;      // {arch}.attention.key_length, or n_embd / n_head
  int64_t n_rot = 0;         // {arch}.rope.dimension_count, or head_dim
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;
  bool rope_neox = false;    // qwen2: NeoX pairs; llama: adjacent pairs
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale_factor = 1.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int64_t rope_orig_ctx = 8192;

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and validates hyper-parameters. Unsupported architectures are refused by
// name; missing or inconsistent values name the key. n_vocab comes from the
// tokenizer token list or the embedding tensor (the caller fills it if 0).
StatusOr<ModelHparams> hparams_from_metadata(const Metadata& md);

// One line per field, for `sluice info` and the load summary.
std::string hparams_summary(const ModelHparams& hp);

}  // namespace sluice
