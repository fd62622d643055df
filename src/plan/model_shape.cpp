#include "plan/model_shape.h"

#include <fmt/format.h>

#include "arch/arch_spec.h"
#include "format/hf_config.h"
#include "model/hparams.h"
#include "model/synth.h"

namespace sluice::plan {
namespace {

ModelShape dense(std::string name, int64_t n_vocab, int64_t n_embd, int64_t n_layer, int64_t n_head,
                 int64_t n_head_kv, int64_t n_ff, int64_t n_ctx_train) {
  return ModelShape{.name = std::move(name), .n_vocab = n_vocab, .n_embd = n_embd, .n_layer = n_layer,
                    .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = n_embd / n_head, .n_ff = n_ff,
                    .n_ctx_train = n_ctx_train};
}

// A model synth also writes (model/synth.h) is defined there once, and read
// here the way the planner reads that file's metadata.
ModelShape from_synth(const std::string& synth_name, std::string name, int64_t n_layer = 0) {
  ModelShape s = shape_from_synth(synth_preset(synth_name, n_layer).value()).value();
  s.name = std::move(name);
  return s;
}

std::vector<ModelShape> presets() {
  std::vector<ModelShape> p = {
      dense("llama-2-7b", 32000, 4096, 32, 32, 32, 11008, 4096),
      dense("llama-2-13b", 32000, 5120, 40, 40, 40, 13824, 4096),
      dense("llama-2-70b", 32000, 8192, 80, 64, 8, 28672, 4096),
      from_synth("8b", "llama-3-8b"),
      from_synth("70b-slice", "llama-3-70b", 80),  // the slice's layer shape, all 80 layers
      dense("llama-3.1-405b", 128256, 16384, 126, 128, 8, 53248, 131072),
  };
  // GLM-4.7 (355B total, ~32B active): 92 blocks, the first 3 dense; 160 routed
  // experts of width 1536 with 8 used per token, plus one shared expert.
  ModelShape glm = dense("glm-4.7", 151552, 5120, 92, 96, 8, 12288, 131072);
  glm.head_dim = 128;
  glm.n_expert = 160;
  glm.n_expert_used = 8;
  glm.n_ff_expert = 1536;
  glm.n_ff_shared = 1536;
  glm.n_layer_dense = 3;
  p.push_back(glm);
  // Mistral 7B v0.1 (a window of 4096 on every block), Gemma 2 9B (heads of
  // 256, post-norms, window 4096 on the even blocks, no LM head), Gemma 3 4B
  // text (q/k norms, window 1024 on 5 of every 6 blocks): the windowed blocks,
  // norms and tied head come from the architecture's table, as for a file.
  for (const char* name : {"mistral-7b", "gemma2-9b", "gemma3-4b"}) p.push_back(from_synth(name, name));
  return p;
}

// What an architecture's table says that the hyper-parameters do not: the
// norms of a block, q/k norms, and whether it has an LM head at all.
void apply_arch(const ArchSpec& spec, ModelShape* s) {
  s->n_norm_layer = 0;
  for (const TensorSpec& t : spec.tensors) {
    const bool block_norm = t.role == TensorRole::kAttnNorm || t.role == TensorRole::kFfnNorm ||
                            t.role == TensorRole::kAttnPostNorm || t.role == TensorRole::kFfnPostNorm;
    if (t.per_layer && block_norm && !t.optional) ++s->n_norm_layer;
  }
  s->qk_norm = spec.find(TensorRole::kAttnQNorm) != nullptr;
  s->tied_embeddings = spec.find(TensorRole::kOutput) == nullptr;
}

int64_t count_windowed_layers(const ModelHparams& hp) {
  int64_t n = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) n += hp.layer_is_swa(l) ? 1 : 0;
  return n;
}

}  // namespace

Status validate_shape(const ModelShape& s) {
  if (s.n_vocab <= 0 || s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0)
    return invalid_argument("{}: vocab, dim, layers, heads and KV heads must be positive", s.name);
  if (s.head_dim < 0 || (s.head_dim == 0 && s.n_embd % s.n_head != 0))
    return invalid_argument("{}: dim {} is not a multiple of {} heads", s.name, s.n_embd, s.n_head);
  if (s.n_head % s.n_head_kv != 0)
    return invalid_argument("{}: {} heads are not a multiple of {} KV heads", s.name, s.n_head, s.n_head_kv);
  if (s.n_ff < 0 || s.n_ff_expert < 0 || s.n_ff_shared < 0) return invalid_argument("{}: negative FFN width", s.name);
  if (s.is_moe()) {
    if (s.n_expert_used <= 0 || s.n_expert_used > s.n_expert)
      return invalid_argument("{}: {} experts used of {}", s.name, s.n_expert_used, s.n_expert);
    if (s.n_ff_expert <= 0) return invalid_argument("{}: MoE without an expert FFN width", s.name);
    if (s.n_layer_dense < 0 || s.n_layer_dense > s.n_layer)
      return invalid_argument("{}: {} dense blocks of {}", s.name, s.n_layer_dense, s.n_layer);
  } else if (s.n_ff <= 0) {
    return invalid_argument("{}: dense model needs a positive FFN width", s.name);
  }
  if (s.n_layer_dense > 0 && s.n_ff <= 0) return invalid_argument("{}: dense blocks need an FFN width", s.name);
  if (s.n_norm_layer < 0) return invalid_argument("{}: {} norms per block", s.name, s.n_norm_layer);
  if (s.n_swa < 0 || s.n_layer_swa < 0 || s.n_layer_swa > s.n_layer)
    return invalid_argument("{}: sliding window {} on {} of {} layers", s.name, s.n_swa, s.n_layer_swa, s.n_layer);
  return Status::ok_status();
}

ParamCount count_params(const ModelShape& s) {
  ParamCount c;
  c.embedding = s.n_vocab * s.n_embd;
  c.output = s.tied_embeddings ? 0 : s.n_vocab * s.n_embd;
  const int64_t attn_per_layer = s.n_embd * (s.n_embd_q() + 2 * s.n_embd_kv()) + s.n_embd_q() * s.n_embd;
  c.attention = attn_per_layer * s.n_layer;
  const int64_t n_dense = s.is_moe() ? s.n_layer_dense : s.n_layer;
  const int64_t n_moe = s.n_layer_moe();
  c.ffn = 3 * s.n_embd * s.n_ff * n_dense + 3 * s.n_embd * s.n_ff_shared * n_moe;
  c.experts = 3 * s.n_embd * s.n_ff_expert * s.n_expert * n_moe;
  c.experts_active = 3 * s.n_embd * s.n_ff_expert * s.n_expert_used * n_moe;
  c.router = s.n_embd * s.n_expert * n_moe;
  c.norm = s.n_norm_layer * s.n_embd * s.n_layer + s.n_embd + (s.qk_norm ? 2 * s.head_dim_or_default() * s.n_layer : 0);
  return c;
}

StatusOr<ModelShape> preset_shape(const std::string& name) {
  const std::string want = name == "405b" ? "llama-3.1-405b" : name;
  for (const ModelShape& s : presets())
    if (s.name == want) return s;
  std::string names;
  for (const std::string& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("unknown model preset '{}' (presets: {})", name, names);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const ModelShape& s : presets()) names.push_back(s.name);
  return names;
}

StatusOr<ModelShape> shape_from_metadata(const Metadata& md) {
  // The engine's own reader: the planner and the model agree on every value.
  ASSIGN_OR_RETURN(const ModelHparams hp, read_hparams(md));
  ModelShape s{.name = md.get_string("general.name").value_or(hp.arch),
               .n_vocab = hp.n_vocab,
               .n_embd = hp.n_embd,
               .n_layer = hp.n_layer,
               .n_head = hp.n_head,
               .n_head_kv = hp.n_head_kv,
               .head_dim = hp.head_dim,
               .n_ff = hp.n_ff,
               .n_ctx_train = hp.n_ctx_train,
               .n_expert = hp.n_expert,
               .n_expert_used = hp.n_expert_used,
               .n_ff_expert = hp.n_ff_expert,
               .n_ff_shared = hp.n_ff_shared,
               .n_layer_dense = hp.n_layer_dense};
  if (hp.spec) apply_arch(*hp.spec, &s);
  s.n_swa = hp.n_swa;
  s.n_layer_swa = count_windowed_layers(hp);
  RETURN_IF_ERROR(validate_shape(s));
  return s;
}

StatusOr<ModelShape> shape_from_model_file(const ModelFile& file) {
  ASSIGN_OR_RETURN(ModelShape s, shape_from_metadata(file.metadata));
  s.tied_embeddings = file.find(TensorRole::kOutput) == nullptr;
  return s;
}

StatusOr<ModelShape> shape_from_synth(const SynthShape& synth) {
  ASSIGN_OR_RETURN(const Metadata md, synth_metadata(synth));
  ASSIGN_OR_RETURN(ModelShape s, shape_from_metadata(md));
  s.name = synth.name;
  return s;
}

StatusOr<ModelShape> shape_from_hf_config(const std::string& json_text, const std::string& name) {
  // The loader's reader of config.json, then the engine's of its metadata.
  ASSIGN_OR_RETURN(const HfConfig cfg, parse_hf_config(json_text, name, /*model_name=*/"", HfConfigUse::kPlan));
  StatusOr<ModelShape> shape = shape_from_metadata(cfg.metadata);
  if (!shape.ok()) return shape.status().with_context(name);
  ModelShape s = std::move(shape).value();
  s.name = cfg.model_type;
  s.tied_embeddings = cfg.tie_word_embeddings;
  return s;
}

std::string shape_summary(const ModelShape& s) {
  std::string out = fmt::format("{}: {} layers, dim {}, {} heads ({} KV, head dim {}), ffn {}, vocab {}", s.name, s.n_layer,
                                s.n_embd, s.n_head, s.n_head_kv, s.head_dim_or_default(), s.n_ff, s.n_vocab);
  if (s.is_moe())
    out += fmt::format(", MoE {} experts ({} used) of ffn {}, shared ffn {}, {} dense blocks", s.n_expert,
                       s.n_expert_used, s.n_ff_expert, s.n_ff_shared, s.n_layer_dense);
  if (s.n_swa > 0 && s.n_layer_swa > 0)
    out += s.n_layer_swa == s.n_layer ? fmt::format(", sliding window {}", s.n_swa)
                                      : fmt::format(", sliding window {} on {} of {} layers", s.n_swa, s.n_layer_swa,
                                                    s.n_layer);
  if (s.tied_embeddings) out += ", output tied to the embeddings";
  return out;
}

}  // namespace sluice::plan
