#include "arch/arch_spec.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace sluice {
namespace {

using D = Dim;
using K = TensorKind;
using P = FfnPart;
using R = TensorRole;

template <size_t... N>
constexpr auto concat(const std::array<TensorSpec, N>&... parts) {
  std::array<TensorSpec, (N + ...)> out{};
  size_t i = 0;
  ((std::copy(parts.begin(), parts.end(), out.begin() + static_cast<std::ptrdiff_t>(i)), i += N), ...);
  return out;
}

// Rows shared by the families below. Groups (matmuls one dispatch runs on
// one input): 0 q/k/v, 1 attention output, 2 gate/up, 3 down, 4 the router,
// 5 the shared expert's gate/up, 6 its down; outside the blocks 0 is the
// output head. Per-expert matrices are grouped per expert (gate/up, down).
// The embedding table and the final norm, which every family has; a family
// whose head is the embedding table (tied) has no output head.
constexpr std::array<TensorSpec, 2> kEmbdAndNorm = {{
    {R::kTokenEmbd, "token_embd.weight", "model.embed_tokens.weight", false, K::kMatrix, {D::kEmbd, D::kVocab}, false, P::kAny, -1},
    {R::kOutputNorm, "output_norm.weight", "model.norm.weight", false, K::kVector, {D::kEmbd}, false, P::kAny, -1},
}};
constexpr std::array<TensorSpec, 1> kOutputHead = {{
    {R::kOutput, "output.weight", "lm_head.weight", false, K::kMatrix, {D::kEmbd, D::kVocab}, true, P::kAny, 0},
}};
constexpr std::array<TensorSpec, 1> kRopeFreqs = {{
    {R::kRopeFreqs, "rope_freqs.weight", "", false, K::kVector, {D::kRotHalf}, true, P::kAny, -1},
}};
constexpr auto kGlobal = concat(kEmbdAndNorm, kOutputHead, kRopeFreqs);
constexpr std::array<TensorSpec, 5> kAttention = {{
    {R::kAttnNorm, "attn_norm.weight", "input_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
    {R::kAttnQ, "attn_q.weight", "self_attn.q_proj.weight", true, K::kMatrix, {D::kEmbd, D::kEmbdQ}, false, P::kAny, 0},
    {R::kAttnK, "attn_k.weight", "self_attn.k_proj.weight", true, K::kMatrix, {D::kEmbd, D::kEmbdKv}, false, P::kAny, 0},
    {R::kAttnV, "attn_v.weight", "self_attn.v_proj.weight", true, K::kMatrix, {D::kEmbd, D::kEmbdKv}, false, P::kAny, 0},
    {R::kAttnOutput, "attn_output.weight", "self_attn.o_proj.weight", true, K::kMatrix, {D::kEmbdQ, D::kEmbd}, false, P::kAny, 1},
}};
constexpr std::array<TensorSpec, 3> kQkvBias = {{
    {R::kAttnQBias, "attn_q.bias", "self_attn.q_proj.bias", true, K::kVector, {D::kEmbdQ}, true, P::kAny, -1},
    {R::kAttnKBias, "attn_k.bias", "self_attn.k_proj.bias", true, K::kVector, {D::kEmbdKv}, true, P::kAny, -1},
    {R::kAttnVBias, "attn_v.bias", "self_attn.v_proj.bias", true, K::kVector, {D::kEmbdKv}, true, P::kAny, -1},
}};
constexpr std::array<TensorSpec, 2> kQkNorm = {{
    {R::kAttnQNorm, "attn_q_norm.weight", "self_attn.q_norm.weight", true, K::kVector, {D::kHeadDim}, false, P::kAny, -1},
    {R::kAttnKNorm, "attn_k_norm.weight", "self_attn.k_norm.weight", true, K::kVector, {D::kHeadDim}, false, P::kAny, -1},
}};
constexpr std::array<TensorSpec, 1> kFfnNorm = {{
    {R::kFfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
}};
// The gated FFN's matrices (SwiGLU, or GeGLU in Gemma).
constexpr std::array<TensorSpec, 3> kGatedFfn = {{
    {R::kFfnGate, "ffn_gate.weight", "mlp.gate_proj.weight", true, K::kMatrix, {D::kEmbd, D::kFf}, false, P::kDense, 2},
    {R::kFfnUp, "ffn_up.weight", "mlp.up_proj.weight", true, K::kMatrix, {D::kEmbd, D::kFf}, false, P::kDense, 2},
    {R::kFfnDown, "ffn_down.weight", "mlp.down_proj.weight", true, K::kMatrix, {D::kFf, D::kEmbd}, false, P::kDense, 3},
}};
constexpr auto kDenseFfn = concat(kFfnNorm, kGatedFfn);
// Routed experts: HF keeps one matrix per expert ({e} is its index); GGUF
// stacks them into one 3-D tensor per role.
constexpr std::array<TensorSpec, 4> kMixtralExperts = {{
    {R::kFfnRouter, "ffn_gate_inp.weight", "block_sparse_moe.gate.weight", true, K::kMatrix, {D::kEmbd, D::kExpert}, false, P::kRouted, 4},
    {R::kFfnGateExps, "ffn_gate_exps.weight", "block_sparse_moe.experts.{e}.w1.weight", true, K::kExperts, {D::kEmbd, D::kFfExpert, D::kExpert}, false, P::kRouted, -1},
    {R::kFfnUpExps, "ffn_up_exps.weight", "block_sparse_moe.experts.{e}.w3.weight", true, K::kExperts, {D::kEmbd, D::kFfExpert, D::kExpert}, false, P::kRouted, -1},
    {R::kFfnDownExps, "ffn_down_exps.weight", "block_sparse_moe.experts.{e}.w2.weight", true, K::kExperts, {D::kFfExpert, D::kEmbd, D::kExpert}, false, P::kRouted, -1},
}};
constexpr std::array<TensorSpec, 4> kQwenExperts = {{
    {R::kFfnRouter, "ffn_gate_inp.weight", "mlp.gate.weight", true, K::kMatrix, {D::kEmbd, D::kExpert}, false, P::kRouted, 4},
    {R::kFfnGateExps, "ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight", true, K::kExperts, {D::kEmbd, D::kFfExpert, D::kExpert}, false, P::kRouted, -1},
    {R::kFfnUpExps, "ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight", true, K::kExperts, {D::kEmbd, D::kFfExpert, D::kExpert}, false, P::kRouted, -1},
    {R::kFfnDownExps, "ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight", true, K::kExperts, {D::kFfExpert, D::kEmbd, D::kExpert}, false, P::kRouted, -1},
}};
constexpr std::array<TensorSpec, 4> kQwenShared = {{
    {R::kFfnSharedGate, "ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", true, K::kVector, {D::kEmbd}, false, P::kShared, -1},
    {R::kFfnGateShexp, "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", true, K::kMatrix, {D::kEmbd, D::kFfShared}, false, P::kShared, 5},
    {R::kFfnUpShexp, "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", true, K::kMatrix, {D::kEmbd, D::kFfShared}, false, P::kShared, 5},
    {R::kFfnDownShexp, "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", true, K::kMatrix, {D::kFfShared, D::kEmbd}, false, P::kShared, 6},
}};

// Gemma 2/3: the embedding table is the head (no output.weight); each block's
// output is RMS-normed before its residual add. HF names the attention
// post-norm post_attention_layernorm, which llama-family checkpoints use for
// the FFN's pre-norm.
constexpr std::array<TensorSpec, 2> kGemmaPreFfn = {{
    {R::kAttnPostNorm, "post_attention_norm.weight", "post_attention_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
    {R::kFfnNorm, "ffn_norm.weight", "pre_feedforward_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
}};
constexpr std::array<TensorSpec, 1> kGemmaFfnPostNorm = {{
    {R::kFfnPostNorm, "post_ffw_norm.weight", "post_feedforward_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
}};
constexpr auto kGemmaPostNormFfn = concat(kGemmaPreFfn, kGatedFfn, kGemmaFfnPostNorm);
// Phi-3: q/k/v in one matrix, gate and up in one (GGUF calls it ffn_up).
constexpr std::array<TensorSpec, 6> kPhi3Layer = {{
    {R::kAttnNorm, "attn_norm.weight", "input_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
    {R::kAttnQkv, "attn_qkv.weight", "self_attn.qkv_proj.weight", true, K::kMatrix, {D::kEmbd, D::kEmbdQkv}, false, P::kAny, 0},
    {R::kAttnOutput, "attn_output.weight", "self_attn.o_proj.weight", true, K::kMatrix, {D::kEmbdQ, D::kEmbd}, false, P::kAny, 1},
    {R::kFfnNorm, "ffn_norm.weight", "post_attention_layernorm.weight", true, K::kVector, {D::kEmbd}, false, P::kAny, -1},
    {R::kFfnGateUp, "ffn_up.weight", "mlp.gate_up_proj.weight", true, K::kMatrix, {D::kEmbd, D::kFf2}, false, P::kDense, 2},
    {R::kFfnDown, "ffn_down.weight", "mlp.down_proj.weight", true, K::kMatrix, {D::kFf, D::kEmbd}, false, P::kDense, 3},
}};
// LongRoPE (Phi-3 128k, Phi-3.5): one divisor per rotated pair for each
// context regime (model/rope_scaling.h). HF keeps them in config.json
// (rope_scaling.long_factor / short_factor), hence no HF tensor name.
constexpr std::array<TensorSpec, 2> kLongRopeFactors = {{
    {R::kRopeFactorsLong, "rope_factors_long.weight", "", false, K::kVector, {D::kRotHalf}, true, P::kAny, -1},
    {R::kRopeFactorsShort, "rope_factors_short.weight", "", false, K::kVector, {D::kRotHalf}, true, P::kAny, -1},
}};

// Llama 2/3, Mistral, TinyLlama, SmolLM and, with experts, Mixtral.
constexpr auto kLlamaTensors = concat(kGlobal, kAttention, kQkvBias, kDenseFfn, kMixtralExperts);
// Qwen2: the llama layer (its q/k/v biases), never routed (that is qwen2moe).
constexpr auto kQwen2Tensors = concat(kGlobal, kAttention, kQkvBias, kDenseFfn);
// Qwen1.5/2-MoE: routed experts plus a shared expert behind a sigmoid gate.
constexpr auto kQwen2MoeTensors = concat(kGlobal, kAttention, kQkvBias, kDenseFfn, kQwenExperts, kQwenShared);
// Qwen3 (dense) and Qwen3-MoE: per-head RMSNorm of q and k, no biases.
constexpr auto kQwen3Tensors = concat(kGlobal, kAttention, kQkNorm, kDenseFfn);
constexpr auto kQwen3MoeTensors = concat(kGlobal, kAttention, kQkNorm, kDenseFfn, kQwenExperts);

// Gemma 2: the llama attention block; GeGLU FFN; post-norms.
constexpr auto kGemma2Tensors = concat(kEmbdAndNorm, kAttention, kGemmaPostNormFfn);
// Gemma 3 (text): Gemma 2's layer with per-head q/k norms.
constexpr auto kGemma3Tensors = concat(kEmbdAndNorm, kAttention, kQkNorm, kGemmaPostNormFfn);
// Phi-3 (mini, medium; Phi-4 uses this architecture name too).
constexpr auto kPhi3Tensors = concat(kEmbdAndNorm, kOutputHead, kLongRopeFactors, kPhi3Layer);

constexpr const char* kLlamaHf[] = {"llama", "mistral", "mixtral"};
constexpr const char* kQwen2Hf[] = {"qwen2"};
constexpr const char* kQwen2MoeHf[] = {"qwen2_moe"};
constexpr const char* kQwen3Hf[] = {"qwen3"};
constexpr const char* kQwen3MoeHf[] = {"qwen3_moe"};
constexpr const char* kGemma2Hf[] = {"gemma2"};
constexpr const char* kGemma3Hf[] = {"gemma3_text"};
constexpr const char* kPhi3Hf[] = {"phi3"};

// Defaults where files say nothing (ArchDefaults).
// llama.cpp's assumption for gemma2 files without the key.
constexpr int64_t gemma2_window(const ArchShape&) { return 4096; }

// Phi-3 files converted before the key existed (mini/medium 4k and 128k).
constexpr int64_t phi3_window(const ArchShape& s) {
  if ((s.n_layer == 32 || s.n_layer == 40) && s.n_ctx_train == 4096) return 2047;
  if (s.n_layer == 32 && s.n_head_kv == 32 && s.n_ctx_train == 131072) return 262144;
  if (s.n_layer == 40 && s.n_ctx_train == 131072) return 131072;
  return 0;
}

constexpr const char* kLlamaWindowHf[] = {"llama", "mistral"};

constexpr ArchSpec kLlama{
    .name = "llama",
    .tensors = kLlamaTensors,
    .hf_model_types = kLlamaHf,
    .hf_permute_qk = true,
    .rope = RopeLayout::kAdjacent,
    .moe = MoeSpec{.renormalize = true},
    .defaults = {.hf_window_every_layer = kLlamaWindowHf},
};
constexpr ArchSpec kQwen2{
    .name = "qwen2",
    .tensors = kQwen2Tensors,
    .hf_model_types = kQwen2Hf,
    .rope = RopeLayout::kNeox,
};
constexpr ArchSpec kQwen2Moe{
    .name = "qwen2moe",
    .tensors = kQwen2MoeTensors,
    .hf_model_types = kQwen2MoeHf,
    .rope = RopeLayout::kNeox,
    .moe = MoeSpec{.renormalize = false, .shared_expert = true, .shared_gate = true},
    .defaults = {.hf_moe_unnormalized = true},
};
constexpr ArchSpec kQwen3{
    .name = "qwen3",
    .tensors = kQwen3Tensors,
    .hf_model_types = kQwen3Hf,
    .rope = RopeLayout::kNeox,
    .qk_norm = true,
};
constexpr ArchSpec kQwen3Moe{
    .name = "qwen3moe",
    .tensors = kQwen3MoeTensors,
    .hf_model_types = kQwen3MoeHf,
    .rope = RopeLayout::kNeox,
    .qk_norm = true,
    .moe = MoeSpec{.renormalize = true},
    .defaults = {.hf_moe_unnormalized = true},
};

constexpr ArchSpec kGemma2{
    .name = "gemma2",
    .tensors = kGemma2Tensors,
    .hf_model_types = kGemma2Hf,
    .rope = RopeLayout::kNeox,
    .act = Activation::kGelu,
    .embd_scale_sqrt = true,
    .attn_softcap = true,
    .final_softcap = true,
    .sliding_window = true,
    .swa_pattern = 2,
    .hf_norm_plus_one = true,
    .defaults = {.window = gemma2_window, .q_scale_by_embd_layers = 46},
};
constexpr ArchSpec kGemma3{
    .name = "gemma3",
    .tensors = kGemma3Tensors,
    .hf_model_types = kGemma3Hf,
    .rope = RopeLayout::kNeox,
    .act = Activation::kGelu,
    .qk_norm = true,
    .embd_scale_sqrt = true,
    .sliding_window = true,
    .swa_pattern = 6,
    .swa_rope_base = 10000.0f,
    .hf_norm_plus_one = true,
    .defaults = {.q_scale_by_embd_layers = 62},
};
constexpr ArchSpec kPhi3{
    .name = "phi3",
    .tensors = kPhi3Tensors,
    .hf_model_types = kPhi3Hf,
    .rope = RopeLayout::kNeox,
    .sliding_window = true,
    .defaults = {.window = phi3_window},
};

constexpr const ArchSpec* kArchs[] = {&kLlama, &kQwen2, &kQwen2Moe, &kQwen3, &kQwen3Moe, &kGemma2, &kGemma3, &kPhi3};

constexpr TensorRole kQkvParts[] = {R::kAttnQ, R::kAttnK, R::kAttnV};
constexpr TensorRole kGateUpParts[] = {R::kFfnGate, R::kFfnUp};

struct Refusal {
  const char* name;
  const char* why;
};
constexpr Refusal kRefused[] = {
    {"deepseek2", "DeepSeek-V2/V3 attention (MLA) and grouped expert routing are not implemented"},
    {"deepseek", "DeepSeek MoE grouped routing is not implemented"},
    {"gpt-oss", "gpt-oss attention sinks and its expert format are not implemented"},
    {"gptoss", "gpt-oss attention sinks and its expert format are not implemented"},
};

}  // namespace

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case R::kTokenEmbd: return "token_embd";
    case R::kOutputNorm: return "output_norm";
    case R::kOutput: return "output";
    case R::kRopeFreqs: return "rope_freqs";
    case R::kRopeFactorsLong: return "rope_factors_long";
    case R::kRopeFactorsShort: return "rope_factors_short";
    case R::kAttnNorm: return "attn_norm";
    case R::kAttnQ: return "attn_q";
    case R::kAttnK: return "attn_k";
    case R::kAttnV: return "attn_v";
    case R::kAttnOutput: return "attn_output";
    case R::kAttnQBias: return "attn_q.bias";
    case R::kAttnKBias: return "attn_k.bias";
    case R::kAttnVBias: return "attn_v.bias";
    case R::kAttnQNorm: return "attn_q_norm";
    case R::kAttnKNorm: return "attn_k_norm";
    case R::kAttnQkv: return "attn_qkv";
    case R::kAttnPostNorm: return "post_attention_norm";
    case R::kFfnNorm: return "ffn_norm";
    case R::kFfnGate: return "ffn_gate";
    case R::kFfnUp: return "ffn_up";
    case R::kFfnDown: return "ffn_down";
    case R::kFfnGateUp: return "ffn_up (gate+up)";
    case R::kFfnPostNorm: return "post_ffw_norm";
    case R::kFfnRouter: return "ffn_gate_inp";
    case R::kFfnGateExps: return "ffn_gate_exps";
    case R::kFfnUpExps: return "ffn_up_exps";
    case R::kFfnDownExps: return "ffn_down_exps";
    case R::kFfnSharedGate: return "ffn_gate_inp_shexp";
    case R::kFfnGateShexp: return "ffn_gate_shexp";
    case R::kFfnUpShexp: return "ffn_up_shexp";
    case R::kFfnDownShexp: return "ffn_down_shexp";
    case R::kCount: break;
  }
  return "?";
}

const TensorSpec* ArchSpec::find(TensorRole role) const {
  for (const TensorSpec& t : tensors)
    if (t.role == role) return &t;
  return nullptr;
}

const TensorSpec* ArchSpec::find_tensor(std::string_view gguf_name) const {
  const auto [layer, suffix] = split_layer_name(gguf_name);
  for (const TensorSpec& t : tensors)
    if (t.per_layer == (layer >= 0) && suffix == t.gguf) return &t;
  return nullptr;
}

const ArchSpec* find_arch(std::string_view name) {
  for (const ArchSpec* a : kArchs)
    if (name == a->name) return a;
  return nullptr;
}

std::span<const ArchSpec* const> supported_archs() { return kArchs; }

std::string supported_arch_names() {
  std::string out;
  for (const ArchSpec* a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a->name);
  return out;
}

std::optional<std::string> refusal_reason(std::string_view name) {
  for (const Refusal& r : kRefused)
    if (name == r.name) return std::string(r.why);
  return std::nullopt;
}

const ArchSpec* find_arch_by_hf_model_type(std::string_view model_type) {
  for (const ArchSpec* a : kArchs)
    for (const char* t : a->hf_model_types)
      if (model_type == t) return a;
  return nullptr;
}

std::span<const TensorRole> fused_parts(TensorRole role) {
  if (role == R::kAttnQkv) return kQkvParts;
  if (role == R::kFfnGateUp) return kGateUpParts;
  return {};
}

std::pair<int64_t, std::string> split_layer_name(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return {-1, std::string(name)};
  size_t i = 4;
  int64_t layer = 0;
  bool digits = false;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    if (layer > (int64_t{1} << 40)) return {-1, std::string(name)};
    layer = layer * 10 + (name[i] - '0');
    digits = true;
    ++i;
  }
  if (!digits || i >= name.size() || name[i] != '.' || i + 1 >= name.size()) return {-1, std::string(name)};
  return {layer, std::string(name.substr(i + 1))};
}

std::string gguf_tensor_name(const TensorSpec& t, int64_t layer) {
  if (!t.per_layer) return t.gguf;
  return "blk." + std::to_string(layer) + "." + t.gguf;
}

}  // namespace sluice
