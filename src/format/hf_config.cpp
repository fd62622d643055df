#include "format/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>


namespace sluice {
namespace {

using nlohmann::json;

constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kDefaultRmsEps = 1e-6;  // transformers' LlamaConfig default

// Typed, non-throwing access to config fields; errors name the file and field.
class ConfigReader {
 public:
  ConfigReader(const json& j, const std::string& name) : j_(j), name_(name) {}

  // A positive integer that fits u32; nullopt if absent or null.
  Status count(const json& obj, const std::string& key, bool required,
               std::optional<int64_t>* out) const {
    out->reset();
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return data_loss("{}: missing '{}'", name_, key);
      return Status::ok_status();
    }
    if (!it->is_number_integer()) {
      return data_loss("{}: '{}' must be an integer, not {}", name_, key, it->type_name());
    }
    const int64_t v = it->get<int64_t>();
    if (v <= 0 || v > 0xffffffffLL) {
      return data_loss("{}: '{}' is {}, expected a positive 32-bit count", name_, key, v);
    }
    *out = v;
    return Status::ok_status();
  }

  // A count that may also be 0 (n_shared_experts, first_k_dense_replace);
  // nullopt if absent or null.
  Status count_or_zero(const json& obj, const std::string& key, std::optional<int64_t>* out) const {
    out->reset();
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::ok_status();
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 0xffffffffLL) {
      return data_loss("{}: '{}' must be a non-negative 32-bit integer, not {}", name_, key, it->dump());
    }
    *out = it->get<int64_t>();
    return Status::ok_status();
  }

  Status number(const json& obj, const std::string& key, std::optional<double>* out) const {
    out->reset();
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::ok_status();
    if (!it->is_number()) {
      return data_loss("{}: '{}' must be a number, not {}", name_, key, it->type_name());
    }
    *out = it->get<double>();
    return Status::ok_status();
  }

  const json& root() const { return j_; }

 private:
  const json& j_;
  const std::string& name_;
};

// Mixture-of-experts fields under each family's names -> the GGUF keys.
//   num_local_experts | num_experts     -> {arch}.expert_count
//   num_experts_per_tok                 -> {arch}.expert_used_count
//   moe_intermediate_size               -> {arch}.expert_feed_forward_length
//   shared_expert_intermediate_size     -> {arch}.expert_shared_feed_forward_length
//   norm_topk_prob                      -> {arch}.expert_weights_norm (absent in a
//                                          Qwen2-MoE / Qwen3-MoE config: false, the
//                                          transformers default of both)
Status set_moe(const ConfigReader& r, const json& j, const std::string& name, const HfConfig& cfg, Metadata* md) {
  const std::string& a = cfg.arch;
  std::optional<int64_t> n_expert, n_used, ff_expert, ff_shared, n_shared, n_dense;
  RETURN_IF_ERROR(r.count(j, "num_local_experts", false, &n_expert));
  if (!n_expert) RETURN_IF_ERROR(r.count(j, "num_experts", false, &n_expert));
  if (!n_expert) RETURN_IF_ERROR(r.count(j, "n_routed_experts", false, &n_expert));
  if (!n_expert) return Status::ok_status();
  RETURN_IF_ERROR(r.count_or_zero(j, "n_shared_experts", &n_shared));
  RETURN_IF_ERROR(r.count_or_zero(j, "first_k_dense_replace", &n_dense));
  RETURN_IF_ERROR(r.count(j, "num_experts_per_tok", true, &n_used));
  RETURN_IF_ERROR(r.count(j, "moe_intermediate_size", false, &ff_expert));
  RETURN_IF_ERROR(r.count(j, "shared_expert_intermediate_size", false, &ff_shared));
  if (const auto it = j.find("mlp_only_layers"); it != j.end() && it->is_array() && !it->empty()) {
    return unimplemented("{}: dense layers among routed ones ('mlp_only_layers') are not supported", name);
  }
  if (const auto it = j.find("decoder_sparse_step"); it != j.end() && it->is_number_integer() && it->get<int64_t>() != 1) {
    return unimplemented("{}: 'decoder_sparse_step' {} is not supported (1 is)", name, it->get<int64_t>());
  }
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  md->set(a + ".expert_count", u32(*n_expert));
  md->set(a + ".expert_used_count", u32(*n_used));
  if (ff_expert) md->set(a + ".expert_feed_forward_length", u32(*ff_expert));
  if (ff_shared) md->set(a + ".expert_shared_feed_forward_length", u32(*ff_shared));
  if (n_shared) md->set(a + ".expert_shared_count", u32(*n_shared));
  if (n_dense) md->set(a + ".leading_dense_block_count", u32(*n_dense));
  if (const auto it = j.find("norm_topk_prob"); it != j.end() && it->is_boolean()) {
    md->set(a + ".expert_weights_norm", MetaValue::boolean(it->get<bool>()));
  } else if (cfg.spec && cfg.spec->defaults.hf_moe_unnormalized) {
    md->set(a + ".expert_weights_norm", MetaValue::boolean(false));
  }
  return Status::ok_status();
}

// A list of positive finite numbers: rope_scaling.<key>.
Status factor_list(const json& rs, const char* key, const std::string& name, std::vector<float>* out) {
  const auto it = rs.find(key);
  if (it == rs.end() || !it->is_array() || it->empty()) {
    return data_loss("{}: LongRoPE rope_scaling needs '{}', a list of numbers", name, key);
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>())) {
      return data_loss("{}: rope_scaling.{}[{}] is {}, expected a positive number", name, key, i, v.dump());
    }
    out->push_back(static_cast<float>(v.get<double>()));
  }
  return Status::ok_status();
}

// LongRoPE ("longrope", formerly "su"; Phi-3 128k, Phi-3.5):
//   long_factor, short_factor         -> HfConfig::rope_factors_long / _short
//                                        (the GGUF tensors rope_factors_{long,short}.weight)
//   original_max_position_embeddings  -> {arch}.rope.scaling.original_context_length
//   (top level, or inside rope_scaling)
//   attention_factor, else sqrt(1 + ln(s) / ln(original)) with
//   s = max_position_embeddings / original (1 when s <= 1)
//                                     -> {arch}.rope.scaling.attn_factor
Status set_longrope(const ConfigReader& r, const json& rs, const std::string& name, int64_t n_ctx, HfConfig* cfg) {
  std::optional<int64_t> original;
  RETURN_IF_ERROR(r.count(r.root(), "original_max_position_embeddings", false, &original));
  if (!original) RETURN_IF_ERROR(r.count(rs, "original_max_position_embeddings", false, &original));
  if (!original) return data_loss("{}: LongRoPE needs 'original_max_position_embeddings'", name);
  RETURN_IF_ERROR(factor_list(rs, "long_factor", name, &cfg->rope_factors_long));
  RETURN_IF_ERROR(factor_list(rs, "short_factor", name, &cfg->rope_factors_short));
  if (cfg->rope_factors_long.size() != cfg->rope_factors_short.size()) {
    return data_loss("{}: rope_scaling.long_factor has {} entries but short_factor {}", name,
                     cfg->rope_factors_long.size(), cfg->rope_factors_short.size());
  }
  std::optional<double> attn;
  RETURN_IF_ERROR(r.number(rs, "attention_factor", &attn));
  if (!attn) {
    const double s = static_cast<double>(n_ctx) / static_cast<double>(*original);
    attn = s > 1.0 ? std::sqrt(1.0 + std::log(s) / std::log(static_cast<double>(*original))) : 1.0;
  }
  if (!(*attn > 0.0)) return data_loss("{}: rope_scaling.attention_factor {} must be positive", name, *attn);
  const std::string p = cfg->arch + ".rope.scaling.";
  cfg->metadata.set(p + "original_context_length", MetaValue::u32(static_cast<uint32_t>(*original)));
  cfg->metadata.set(p + "attn_factor", MetaValue::f32(static_cast<float>(*attn)));
  return Status::ok_status();
}

Status set_rope_scaling(const ConfigReader& r, const json& rs, const std::string& name, int64_t n_ctx,
                        HfConfig* cfg) {
  const std::string& arch = cfg->arch;
  Metadata* md = &cfg->metadata;
  if (rs.is_null()) return Status::ok_status();
  if (!rs.is_object()) return data_loss("{}: 'rope_scaling' must be an object or null", name);
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    const auto it = rs.find(k);
    if (it != rs.end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type.empty() || type == "default") return Status::ok_status();
  if ((type == "longrope" || type == "su") && cfg->spec->find(TensorRole::kRopeFactorsLong)) {
    return set_longrope(r, rs, name, n_ctx, cfg);
  }
  if (type != "linear" && type != "llama3") {
    return unimplemented("{}: rope_scaling type '{}' is not supported for {} (linear, llama3{} are)", name,
                         type, arch, cfg->spec->find(TensorRole::kRopeFactorsLong) ? ", longrope" : "");
  }
  std::optional<double> factor;
  RETURN_IF_ERROR(r.number(rs, "factor", &factor));
  if (!factor || *factor <= 0) return data_loss("{}: rope_scaling needs a positive 'factor'", name);
  const std::string p = arch + ".rope.scaling.";
  md->set(p + "type", MetaValue::str(type));
  md->set(p + "factor", MetaValue::f32(static_cast<float>(*factor)));
  if (type == "llama3") {
    std::optional<double> low, high;
    std::optional<int64_t> original;
    RETURN_IF_ERROR(r.number(rs, "low_freq_factor", &low));
    RETURN_IF_ERROR(r.number(rs, "high_freq_factor", &high));
    RETURN_IF_ERROR(r.count(rs, "original_max_position_embeddings", true, &original));
    if (!low || !high) {
      return data_loss("{}: llama3 rope_scaling needs low_freq_factor and high_freq_factor", name);
    }
    md->set(p + "low_freq_factor", MetaValue::f32(static_cast<float>(*low)));
    md->set(p + "high_freq_factor", MetaValue::f32(static_cast<float>(*high)));
    md->set(p + "original_context_length", MetaValue::u32(static_cast<uint32_t>(*original)));
  }
  return Status::ok_status();
}

// Sliding window, soft-caps and the attention scale (gemma2, gemma3 text,
// phi3) -> the GGUF keys hparams reads:
//   sliding_window            -> {arch}.attention.sliding_window
//   attn_logit_softcapping    -> {arch}.attn_logit_softcapping (gemma2)
//   final_logit_softcapping   -> {arch}.final_logit_softcapping (gemma2)
//   query_pre_attn_scalar     -> {arch}.attention.query_pre_attn_scalar (gemma)
//   rope_local_base_freq      -> {arch}.rope.freq_base_swa (gemma3)
//   partial_rotary_factor     -> {arch}.rope.dimension_count (phi3)
// Layouts the ArchSpec does not describe (another window pattern, soft-caps
// on Gemma 3) are refused by name.
Status set_window_and_caps(const ConfigReader& r, const json& j, const std::string& name, const HfConfig& cfg,
                           int64_t head_dim, Metadata* md) {
  const ArchSpec& spec = *cfg.spec;
  const std::string& a = cfg.arch;
  if (!spec.sliding_window) return Status::ok_status();
  std::optional<int64_t> window, pattern;
  RETURN_IF_ERROR(r.count(j, "sliding_window", false, &window));
  if (window) md->set(a + ".attention.sliding_window", MetaValue::u32(static_cast<uint32_t>(*window)));
  RETURN_IF_ERROR(r.count(j, "sliding_window_pattern", false, &pattern));
  if (pattern && *pattern != spec.swa_pattern) {
    return unimplemented("{}: sliding_window_pattern {} is not supported ({} has {})", name, *pattern, a,
                         spec.swa_pattern);
  }
  if (const auto lt = j.find("layer_types"); lt != j.end() && lt->is_array()) {
    for (size_t l = 0; l < lt->size(); ++l) {
      const bool windowed = (*lt)[l] == "sliding_attention";
      const bool want = spec.swa_pattern <= 1 || static_cast<int64_t>(l) % spec.swa_pattern < spec.swa_pattern - 1;
      if (windowed != want) {
        return unimplemented("{}: layer_types[{}] is {}, which the {} layer pattern does not have", name, l,
                             (*lt)[l].dump(), a);
      }
    }
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    std::optional<double> cap;
    RETURN_IF_ERROR(r.number(j, key, &cap));
    if (!cap) continue;
    const bool supported = std::string(key) == "attn_logit_softcapping" ? spec.attn_softcap : spec.final_softcap;
    if (!supported) return unimplemented("{}: '{}' is not supported for {}", name, key, a);
    md->set(a + "." + key, MetaValue::f32(static_cast<float>(*cap)));
  }
  std::optional<double> qpas, local_base, partial;
  RETURN_IF_ERROR(r.number(j, "query_pre_attn_scalar", &qpas));
  if (qpas) md->set(a + ".attention.query_pre_attn_scalar", MetaValue::f32(static_cast<float>(*qpas)));
  RETURN_IF_ERROR(r.number(j, "rope_local_base_freq", &local_base));
  if (local_base) md->set(a + ".rope.freq_base_swa", MetaValue::f32(static_cast<float>(*local_base)));
  RETURN_IF_ERROR(r.number(j, "partial_rotary_factor", &partial));
  if (partial && *partial != 1.0) {
    const auto n_rot = static_cast<int64_t>(static_cast<double>(head_dim) * *partial);
    if (!(*partial > 0.0 && *partial <= 1.0) || n_rot % 2 != 0) {
      return data_loss("{}: partial_rotary_factor {} does not give an even rotary width", name, *partial);
    }
    md->set(a + ".rope.dimension_count", MetaValue::u32(static_cast<uint32_t>(n_rot)));
  }
  return Status::ok_status();
}

}  // namespace

StatusOr<HfConfig> parse_hf_config(const std::string& json_text, const std::string& name,
                                   const std::string& model_name, HfConfigUse use) {
  const bool plan = use == HfConfigUse::kPlan;
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss("{}: not valid JSON", name);
  if (!j.is_object()) return data_loss("{}: not a JSON object", name);
  // Multimodal configs nest the language model.
  if (plan && j.contains("text_config") && j["text_config"].is_object()) j = json(j["text_config"]);
  const ConfigReader r(j, name);

  HfConfig cfg;
  const auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return data_loss("{}: missing 'model_type'", name);
  cfg.model_type = mt->get<std::string>();
  cfg.spec = find_arch_by_hf_model_type(cfg.model_type);
  if (!cfg.spec && !plan) {
    std::string known;
    for (const ArchSpec* a : supported_archs())
      for (const char* t : a->hf_model_types) known += (known.empty() ? "" : ", ") + std::string(t);
    return unimplemented("{}: model_type '{}' is not supported ({} are)", name, cfg.model_type, known);
  }
  cfg.arch = cfg.spec ? cfg.spec->name : cfg.model_type;
  cfg.permute_qk = cfg.spec && cfg.spec->hf_permute_qk;

  std::optional<int64_t> n_ctx, n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_vocab;
  RETURN_IF_ERROR(r.count(j, "max_position_embeddings", !plan, &n_ctx));
  RETURN_IF_ERROR(r.count(j, "hidden_size", true, &n_embd));
  RETURN_IF_ERROR(r.count(j, "num_hidden_layers", true, &n_layer));
  RETURN_IF_ERROR(r.count(j, "intermediate_size", !plan, &n_ff));
  RETURN_IF_ERROR(r.count(j, "num_attention_heads", true, &n_head));
  RETURN_IF_ERROR(r.count(j, "num_key_value_heads", false, &n_head_kv));
  RETURN_IF_ERROR(r.count(j, "head_dim", false, &head_dim));
  RETURN_IF_ERROR(r.count(j, "vocab_size", true, &n_vocab));
  if (!n_head_kv) n_head_kv = n_head;
  if (*n_head % *n_head_kv != 0) {
    return data_loss("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                     name, *n_head, *n_head_kv);
  }
  if (!head_dim && *n_embd % *n_head != 0) {
    return data_loss("{}: hidden_size {} is not a multiple of num_attention_heads {}", name,
                     *n_embd, *n_head);
  }
  const int64_t n_rot = head_dim ? *head_dim : *n_embd / *n_head;
  std::optional<double> eps, theta;
  RETURN_IF_ERROR(r.number(j, "rms_norm_eps", &eps));
  RETURN_IF_ERROR(r.number(j, "rope_theta", &theta));
  // Architectures whose head is always the embedding table (gemma) tie by default, as transformers does.
  cfg.tie_word_embeddings = cfg.spec && !cfg.spec->find(TensorRole::kOutput);
  if (const auto tie = j.find("tie_word_embeddings"); tie != j.end() && !tie->is_null()) {
    if (!tie->is_boolean()) return data_loss("{}: 'tie_word_embeddings' must be a bool", name);
    cfg.tie_word_embeddings = tie->get<bool>();
  }
  cfg.n_head = *n_head;
  cfg.n_head_kv = *n_head_kv;

  Metadata& md = cfg.metadata;
  const std::string& a = cfg.arch;
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  md.set("general.architecture", MetaValue::str(a));
  md.set("general.name", MetaValue::str(model_name));
  if (n_ctx) md.set(a + ".context_length", u32(*n_ctx));
  md.set(a + ".embedding_length", u32(*n_embd));
  md.set(a + ".block_count", u32(*n_layer));
  if (n_ff) md.set(a + ".feed_forward_length", u32(*n_ff));
  md.set(a + ".attention.head_count", u32(*n_head));
  md.set(a + ".attention.head_count_kv", u32(*n_head_kv));
  md.set(a + ".attention.layer_norm_rms_epsilon",
         MetaValue::f32(static_cast<float>(eps.value_or(kDefaultRmsEps))));
  md.set(a + ".rope.freq_base", MetaValue::f32(static_cast<float>(theta.value_or(kDefaultRopeTheta))));
  md.set(a + ".rope.dimension_count", u32(n_rot));
  if (head_dim) {
    md.set(a + ".attention.key_length", u32(*head_dim));
    md.set(a + ".attention.value_length", u32(*head_dim));
  }
  md.set(a + ".vocab_size", u32(*n_vocab));
  if (const auto rs = j.find("rope_scaling"); rs != j.end() && !plan) {
    RETURN_IF_ERROR(set_rope_scaling(r, *rs, name, *n_ctx, &cfg));
  }
  RETURN_IF_ERROR(set_moe(r, j, name, cfg, &md));
  if (cfg.spec) RETURN_IF_ERROR(set_window_and_caps(r, j, name, cfg, n_rot, &md));
  if (!cfg.rope_factors_long.empty()) {
    const int64_t n_rot_final = md.get_int(a + ".rope.dimension_count").value_or(n_rot);
    if (static_cast<int64_t>(cfg.rope_factors_long.size()) != n_rot_final / 2) {
      return data_loss("{}: rope_scaling.long_factor has {} entries, expected {} (one per rotated pair: {} rotary dims / 2)",
                       name, cfg.rope_factors_long.size(), n_rot_final / 2, n_rot_final);
    }
  }
  if (md.get_int(a + ".expert_count") && cfg.spec && !cfg.spec->moe) {
    return unimplemented("{}: model_type '{}' with experts is not supported", name, cfg.model_type);
  }
  // Mistral v0.1 (and llama configs that set one): every layer attends over the
  // last sliding_window positions; null, absent or use_sliding_window false: none.
  // A model_type without a table (kPlan): as Mistral.
  const std::span<const char* const> every =
      cfg.spec ? cfg.spec->defaults.hf_window_every_layer : std::span<const char* const>();
  if (!cfg.spec || std::find(every.begin(), every.end(), std::string_view(cfg.model_type)) != every.end()) {
    std::optional<int64_t> window;
    RETURN_IF_ERROR(r.count(j, "sliding_window", false, &window));
    const auto use = j.find("use_sliding_window");
    const bool off = use != j.end() && use->is_boolean() && !use->get<bool>();
    if (window && !off) md.set(a + ".attention.sliding_window", u32(*window));
  }
  return cfg;
}

}  // namespace sluice
