// ArchDefaults: what an architecture assumes where its GGUF files or HF
// configs say nothing, one row per ArchSpec that needs one (arch_spec.h says
// how an architecture looks; this, what its files may leave out). The one
// path from metadata to hyper-parameters (model/hparams.h read_hparams) and
// the HF config reader (format/hf_config.h) read it, so neither names an
// architecture.
//
// Plain constant data; every function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "arch/arch_spec.h"

namespace sluice {

// The counts a default may depend on (model/hparams.h has the rest).
struct ArchShape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t n_ctx_train = 0;
};

struct ArchDefaults {
  // The window of a windowed architecture's file without
  // {arch}.attention.sliding_window, from its shape (gemma2: 4096, as
  // llama.cpp assumes; phi3: the files converted before the key existed);
  // 0 or no hook: the key is required.
  int64_t (*window)(const ArchShape& shape) = nullptr;
  // Models of this many layers scale q by 1/sqrt(n_embd / n_head), not
  // 1/sqrt(head_dim), when the file has no {arch}.attention.query_pre_attn_scalar
  // (the 27B gemmas: GGUF has no key, and llama.cpp picks by layer count). 0: none.
  int64_t q_scale_by_embd_layers = 0;
  // An HF config without norm_topk_prob leaves the top-k weights as they are
  // (its config class's default: Qwen2-MoE, Qwen3-MoE), whatever MoeSpec says.
  bool hf_moe_unnormalized = false;
  // HF model_types whose sliding_window (unless null, or use_sliding_window
  // is false) windows every layer of an architecture that has no windowed
  // layers of its own (Mistral v0.1 under llama).
  std::span<const char* const> hf_window_every_layer;
};

// The defaults of spec's architecture (all empty for one without any).
const ArchDefaults& arch_defaults(const ArchSpec& spec);

}  // namespace sluice
