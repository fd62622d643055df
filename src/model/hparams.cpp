#include "model/hparams.h"

#include <cmath>

#include <fmt/format.h>


namespace sluice {
namespace {

StatusOr<int64_t> required_int(const Metadata& md, const std::string& key) {
  auto v = md.get_int(key);
  if (!v) return data_loss("missing metadata key '{}'", key);
  if (*v <= 0 || *v > (int64_t{1} << 40)) return data_loss("metadata '{}' = {} is out of range", key, *v);
  return *v;
}

// An optional count: absent gives `fallback`; present must be in [0, 2^40].
StatusOr<int64_t> optional_int(const Metadata& md, const std::string& key, int64_t fallback) {
  auto v = md.get_int(key);
  if (!v) return fallback;
  if (*v < 0 || *v > (int64_t{1} << 40)) return data_loss("metadata '{}' = {} is out of range", key, *v);
  return *v;
}

Status read_moe(const Metadata& md, const std::string& a, ModelHparams* hp) {
  ASSIGN_OR_RETURN(hp->n_expert, optional_int(md, a + "expert_count", 0));
  if (hp->n_expert == 0) return Status();
  ASSIGN_OR_RETURN(hp->n_expert_used, required_int(md, a + "expert_used_count"));
  if (hp->n_expert_used > hp->n_expert) {
    return data_loss("expert_used_count {} exceeds expert_count {}", hp->n_expert_used, hp->n_expert);
  }
  ASSIGN_OR_RETURN(hp->n_ff_expert, optional_int(md, a + "expert_feed_forward_length", hp->n_ff));
  if (hp->n_ff_expert <= 0) return data_loss("missing metadata key '{}expert_feed_forward_length'", a);
  ASSIGN_OR_RETURN(const int64_t n_shared, optional_int(md, a + "expert_shared_count", 0));
  ASSIGN_OR_RETURN(const int64_t ff_shared, optional_int(md, a + "expert_shared_feed_forward_length", 0));
  hp->n_ff_shared = ff_shared > 0 ? std::max<int64_t>(1, n_shared) * ff_shared : n_shared * hp->n_ff_expert;
  ASSIGN_OR_RETURN(hp->n_layer_dense, optional_int(md, a + "leading_dense_block_count", 0));
  if (hp->n_layer_dense > hp->n_layer) {
    return data_loss("leading_dense_block_count {} exceeds block_count {}", hp->n_layer_dense, hp->n_layer);
  }
  if (hp->spec && hp->spec->moe) hp->expert_weights_norm = hp->spec->moe->renormalize;
  if (auto norm = md.get_bool(a + "expert_weights_norm")) hp->expert_weights_norm = *norm;
  return Status();
}

// Sliding window, soft-caps, attention and embedding scales, with llama.cpp's
// defaults where its files may lack a key (the architecture's own in
// ArchSpec::defaults).
Status read_window_and_caps(const Metadata& md, const std::string& a, ModelHparams* hp) {
  const ArchSpec* spec = hp->spec;
  if (!spec) return Status();
  const ArchDefaults& defaults = spec->defaults;
  if (spec->sliding_window) {
    hp->swa_pattern = spec->swa_pattern;
    hp->rope_freq_base_swa = spec->swa_rope_base;
    if (spec->swa_rope_base > 0.0f) {
      hp->rope_freq_base_swa = static_cast<float>(md.get_float(a + "rope.freq_base_swa").value_or(spec->swa_rope_base));
      if (!(hp->rope_freq_base_swa > 0.0f)) return data_loss("{}rope.freq_base_swa must be positive", a);
    }
    if (!md.get_int(a + "attention.sliding_window")) {
      if (defaults.window) {
        hp->n_swa = defaults.window({.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .n_ctx_train = hp->n_ctx_train});
      }
      if (hp->n_swa == 0) return data_loss("missing metadata key '{}attention.sliding_window'", a);
    }
  }
  if (spec->attn_softcap) {
    hp->attn_softcap = static_cast<float>(md.get_float(a + "attn_logit_softcapping").value_or(50.0));
    if (!(hp->attn_softcap > 0.0f)) return data_loss("{}attn_logit_softcapping must be positive", a);
  }
  if (spec->final_softcap) {
    hp->final_softcap = static_cast<float>(md.get_float(a + "final_logit_softcapping").value_or(30.0));
    if (!(hp->final_softcap > 0.0f)) return data_loss("{}final_logit_softcapping must be positive", a);
  }
  if (spec->embd_scale_sqrt) hp->embd_scale = std::sqrt(static_cast<float>(hp->n_embd));
  // Gemma scales q by 1/sqrt(query_pre_attn_scalar): head_dim, except the
  // 27B models' n_embd / n_head. GGUF has no key for it; llama.cpp picks by
  // layer count (ArchDefaults::q_scale_by_embd_layers). HF configs carry it
  // and the converter keeps it under this key.
  double scalar = static_cast<double>(hp->head_dim);
  if (defaults.q_scale_by_embd_layers > 0 && hp->n_layer == defaults.q_scale_by_embd_layers) {
    scalar = static_cast<double>(hp->n_embd / hp->n_head);
  }
  if (auto q = md.get_float(a + "attention.query_pre_attn_scalar")) scalar = *q;
  if (!(scalar > 0.0)) return data_loss("{}attention.query_pre_attn_scalar must be positive", a);
  hp->attn_scale = 1.0f / std::sqrt(static_cast<float>(scalar));  // as 1.0f / sqrtf(head_dim) before
  return Status();
}

}  // namespace

int64_t ModelHparams::dim(Dim d) const {
  switch (d) {
    case Dim::kNone: return 1;
    case Dim::kEmbd: return n_embd;
    case Dim::kEmbdQ: return n_embd_q();
    case Dim::kEmbdKv: return n_embd_kv();
    case Dim::kHeadDim: return head_dim;
    case Dim::kFf: return n_ff;
    case Dim::kVocab: return n_vocab;
    case Dim::kRotHalf: return n_rot / 2;
    case Dim::kExpert: return n_expert;
    case Dim::kFfExpert: return n_ff_expert;
    case Dim::kFfShared: return n_ff_shared;
    case Dim::kEmbdQkv: return n_embd_q() + 2 * n_embd_kv();
    case Dim::kFf2: return 2 * n_ff;
  }
  return 0;
}

StatusOr<ModelHparams> read_hparams(const Metadata& md) {
  ModelHparams hp;
  auto arch = md.get_string("general.architecture");
  if (!arch) return data_loss("missing metadata key 'general.architecture'");
  hp.arch = *arch;
  hp.spec = find_arch(hp.arch);
  const std::string a = hp.arch + ".";
  ASSIGN_OR_RETURN(hp.n_embd, required_int(md, a + "embedding_length"));
  ASSIGN_OR_RETURN(hp.n_layer, required_int(md, a + "block_count"));
  ASSIGN_OR_RETURN(hp.n_head, required_int(md, a + "attention.head_count"));
  ASSIGN_OR_RETURN(hp.n_ff, optional_int(md, a + "feed_forward_length", 0));
  hp.n_head_kv = md.get_int(a + "attention.head_count_kv").value_or(hp.n_head);
  hp.n_ctx_train = md.get_int(a + "context_length").value_or(2048);
  hp.head_dim = md.get_int(a + "attention.key_length").value_or(hp.n_embd / hp.n_head);
  hp.n_rot = md.get_int(a + "rope.dimension_count").value_or(hp.head_dim);
  hp.rms_eps = static_cast<float>(md.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  hp.rope_freq_base = static_cast<float>(md.get_float(a + "rope.freq_base").value_or(10000.0));
  if (hp.spec) hp.rope_layout = hp.spec->rope;
  if (auto vs = md.get_int(a + "vocab_size")) hp.n_vocab = *vs;
  if (const MetaArray* toks = md.get_array("tokenizer.ggml.tokens")) hp.n_vocab = static_cast<int64_t>(toks->size());

  if (auto vl = md.get_int(a + "attention.value_length"); vl && *vl != hp.head_dim) {
    return unimplemented("attention.value_length {} != key_length {} is not supported", *vl, hp.head_dim);
  }
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0) {
    return data_loss("head_count {} is not a multiple of head_count_kv {}", hp.n_head, hp.n_head_kv);
  }
  if (hp.head_dim <= 0) return data_loss("attention.key_length {} must be positive", hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    return data_loss("rope.dimension_count {} invalid for head dim {}", hp.n_rot, hp.head_dim);
  }
  if (!(hp.rms_eps > 0.0f) || !(hp.rope_freq_base > 0.0f)) {
    return data_loss("rms epsilon {} and rope.freq_base {} must be positive", hp.rms_eps, hp.rope_freq_base);
  }
  RETURN_IF_ERROR(read_moe(md, a, &hp));
  ASSIGN_OR_RETURN(hp.n_swa, optional_int(md, a + "attention.sliding_window", 0));
  hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  RETURN_IF_ERROR(read_window_and_caps(md, a, &hp));
  if (hp.n_ff == 0 && (!hp.is_moe() || hp.n_layer_dense > 0)) {
    return data_loss("missing metadata key '{}feed_forward_length'", a);
  }

  const std::string scaling = md.get_string(a + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    hp.rope_scaling = RopeScaling::kLinear;
  } else if (scaling == "llama3") {
    hp.rope_scaling = RopeScaling::kLlama3;
    hp.rope_low_freq_factor = static_cast<float>(md.get_float(a + "rope.scaling.low_freq_factor").value_or(1.0));
    hp.rope_high_freq_factor = static_cast<float>(md.get_float(a + "rope.scaling.high_freq_factor").value_or(4.0));
  } else if (scaling != "none" && scaling != "") {
    return unimplemented("rope scaling type '{}' is not supported (none, linear, llama3)", scaling);
  }
  // 0 says nothing and counts as absent (files that loaded before keep loading).
  hp.rope_orig_ctx = md.get_int(a + "rope.scaling.original_context_length").value_or(0);
  if (hp.rope_orig_ctx <= 0) hp.rope_orig_ctx = hp.rope_scaling == RopeScaling::kLlama3 ? 8192 : hp.n_ctx_train;
  hp.rope_attn_factor = static_cast<float>(md.get_float(a + "rope.scaling.attn_factor").value_or(1.0));
  if (!(hp.rope_attn_factor > 0.0f) || !std::isfinite(hp.rope_attn_factor)) {
    return data_loss("{}rope.scaling.attn_factor {} must be positive and finite", a, hp.rope_attn_factor);
  }
  if (hp.rope_scaling != RopeScaling::kNone) {
    hp.rope_scale_factor = static_cast<float>(md.get_float(a + "rope.scaling.factor").value_or(1.0));
    if (!(hp.rope_scale_factor > 0.0f)) return data_loss("rope.scaling.factor must be positive");
  }
  return hp;
}

StatusOr<ModelHparams> hparams_from_metadata(const Metadata& md) {
  auto arch = md.get_string("general.architecture");
  if (!arch) return data_loss("missing metadata key 'general.architecture'");
  if (!find_arch(*arch)) {
    if (auto why = refusal_reason(*arch)) {
      return unimplemented("architecture '{}' is not supported: {} (supported: {})", *arch, *why,
                           supported_arch_names());
    }
    return unimplemented("architecture '{}' is not supported (supported: {})", *arch, supported_arch_names());
  }
  ASSIGN_OR_RETURN(ModelHparams hp, read_hparams(md));
  // Routing rules beyond softmax top-k (DeepSeek's sigmoid gating and scaled
  // weights) are refused by name rather than run wrong.
  const std::string a = *arch + ".";
  if (auto gating = md.get_int(a + "expert_gating_func"); gating && *gating != 1) {
    return unimplemented("{}expert_gating_func {} (sigmoid gating) is not supported; softmax (1) is", a, *gating);
  }
  if (auto scale = md.get_float(a + "expert_weights_scale"); scale && *scale != 1.0) {
    return unimplemented("{}expert_weights_scale {} is not supported (1 is)", a, *scale);
  }
  return hp;
}

std::string hparams_summary(const ModelHparams& hp) {
  const char* scaling = hp.rope_scaling == RopeScaling::kLinear   ? "linear"
                        : hp.rope_scaling == RopeScaling::kLlama3 ? "llama3"
                                                                  : "none";
  std::string out = fmt::format(
      "arch {} | vocab {} | ctx_train {} | embd {} | layers {} | ff {} | heads {} (kv {}) | head_dim {} | "
      "rope {} dims, base {:g}, {} pairs, scaling {} x{:g} | rms_eps {:g}",
      hp.arch, hp.n_vocab, hp.n_ctx_train, hp.n_embd, hp.n_layer, hp.n_ff, hp.n_head, hp.n_head_kv,
      hp.head_dim, hp.n_rot, hp.rope_freq_base, hp.rope_layout == RopeLayout::kNeox ? "neox" : "adjacent", scaling,
      hp.rope_scale_factor, hp.rms_eps);
  if (hp.is_moe()) {
    out += fmt::format(" | experts {} (top {}{}) of ff {}", hp.n_expert, hp.n_expert_used,
                       hp.expert_weights_norm ? ", renormalized" : "", hp.n_ff_expert);
    if (hp.n_ff_shared > 0) out += fmt::format(", shared ff {}", hp.n_ff_shared);
    if (hp.n_layer_dense > 0) out += fmt::format(", {} dense layers first", hp.n_layer_dense);
  }
  if (hp.rope_attn_factor != 1.0f) {
    out += fmt::format(" | rope magnitude x{:g}, original ctx {}", hp.rope_attn_factor, hp.rope_orig_ctx);
  }
  if (hp.attn_softcap > 0.0f || hp.final_softcap > 0.0f) {
    out += fmt::format(" | softcap attn {:g}, final {:g}", hp.attn_softcap, hp.final_softcap);
  }
  if (hp.n_swa > 0) {
    out += hp.swa_pattern <= 1 ? fmt::format(" | sliding window {}", hp.n_swa)
                               : fmt::format(" | sliding window {} ({} of every {} layers)", hp.n_swa,
                                             hp.swa_pattern - 1, hp.swa_pattern);
  }
  return out;
}

}  // namespace sluice
