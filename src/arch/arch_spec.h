// ArchSpec: one table per model architecture, the single description of how
// the architecture looks in files, what its decoder computes, and what its
// files may leave out (ArchDefaults).
//
// Everything that needs to know an architecture reads its ArchSpec instead of
// listing tensor names of its own: the HF loader (HF tensor names -> GGUF names,
// config model_type -> architecture), hyper-parameter reading, weight binding
// and repacking (dispatch groups), the weight store's layer pointers, the
// calibration probes (a layer's dispatches), the planner's ModelShape and
// `sluice info`. The decoder is a few builders (attention block, dense FFN,
// MoE FFN) that read the spec's flags; adding an architecture is a table entry
// in arch_spec.cpp plus any operator it needs that no backend has yet.
//
// Tensor shapes are written in GGUF order, ne[0] innermost: a matrix that maps
// n_in to n_out is [n_in, n_out]; stacked experts are [n_in, n_out, n_expert].
//
//   role         GGUF name (blk.N. prefix per layer)   shape
//   token_embd   token_embd.weight                      [n_embd, n_vocab]
//   attn_q       blk.N.attn_q.weight                    [n_embd, n_embd_q]
//   ffn_gate     blk.N.ffn_gate.weight                  [n_embd, n_ff]
//   ffn_up_exps  blk.N.ffn_up_exps.weight               [n_embd, n_ff_exp, n_expert]
//   ...          (the full tables are in arch_spec.cpp)
//
// Plain constant data; every function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

enum class RopeLayout {
  kAdjacent,  // rotate pairs (x[2i], x[2i+1]): GGUF llama layout
  kNeox,      // rotate pairs (x[i], x[i + n_rot/2]): NeoX / HF rotate_half layout
};

// The activation of a gated FFN: h = act(gate) * up.
enum class Activation {
  kSilu,  // SwiGLU (llama, qwen, mistral)
  kGelu,  // GeGLU, tanh approximation (gemma)
};

enum class NormKind { kRms };

// What a tensor does in the decoder. Per-layer roles name one layer's tensor.
enum class TensorRole : uint8_t {
  // Outside the blocks.
  kTokenEmbd,
  kOutputNorm,
  kOutput,     // the LM head; absent means tied to kTokenEmbd
  kRopeFreqs,  // per-frequency RoPE divisors (llama 3.1 GGUFs)
  kRopeFactorsLong,   // LongRoPE divisors for contexts past the original one (phi3 128k)
  kRopeFactorsShort,  // LongRoPE divisors within the original context
  // Attention block.
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kAttnQBias,
  kAttnKBias,
  kAttnVBias,
  kAttnQNorm,  // per-head RMSNorm of q before RoPE
  kAttnKNorm,
  kAttnQkv,       // q, k and v in one matrix [n_embd, n_embd_q + 2 n_embd_kv] (phi3); bound as
                  // three row slices in kAttnQ/K/V
  kAttnPostNorm,  // RMSNorm of the attention output before the residual add (gemma2/3)
  // Dense FFN block.
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
  kFfnGateUp,     // gate and up in one matrix [n_embd, 2 n_ff], gate rows first (phi3); bound
                  // as two row slices in kFfnGate/kFfnUp
  kFfnPostNorm,   // RMSNorm of the FFN output before the residual add (gemma2/3)
  // Mixture-of-experts FFN block.
  kFfnRouter,      // ffn_gate_inp: [n_embd, n_expert]
  kFfnGateExps,
  kFfnUpExps,
  kFfnDownExps,
  kFfnSharedGate,  // ffn_gate_inp_shexp: [n_embd] scalar gate of the shared expert
  kFfnGateShexp,
  kFfnUpShexp,
  kFfnDownShexp,
  kCount,
};
inline constexpr int kNumTensorRoles = static_cast<int>(TensorRole::kCount);
// "attn_q", "ffn_up_exps", ... (the GGUF stem of the role).
const char* tensor_role_name(TensorRole role);

// A symbolic dimension, resolved against hyper-parameters (model/hparams.h).
enum class Dim : uint8_t {
  kNone,      // unused trailing dimension
  kEmbd,      // n_embd
  kEmbdQ,     // n_head * head_dim
  kEmbdKv,    // n_head_kv * head_dim
  kHeadDim,
  kFf,        // dense FFN width
  kVocab,
  kRotHalf,   // n_rot / 2
  kExpert,    // n_expert
  kFfExpert,  // one routed expert's FFN width
  kFfShared,  // the shared expert's FFN width
  kEmbdQkv,   // n_embd_q + 2 n_embd_kv (a fused q/k/v matrix)
  kFf2,       // 2 n_ff (a fused gate/up matrix)
};

enum class TensorKind : uint8_t {
  kVector,   // 1-D (norms, biases): converted to f32 at load
  kMatrix,   // 2-D weight matrix [n_in, n_out]
  kExperts,  // 3-D stacked experts [n_in, n_out, n_expert]
};

// Which FFN flavour a per-layer tensor belongs to.
enum class FfnPart : uint8_t {
  kAny,     // every layer (attention tensors, norms)
  kDense,   // layers with a dense FFN
  kRouted,  // MoE layers
  kShared,  // MoE layers of an architecture with a shared expert
};

struct TensorSpec {
  TensorRole role;
  const char* gguf;         // "attn_q.weight" (per layer, after "blk.N.") or "token_embd.weight"
  const char* hf;           // HF name: "self_attn.q_proj.weight" (after "model.layers.N.") or the full name; "" if none
  bool per_layer;
  TensorKind kind;
  Dim ne[3];                // GGUF shape, ne[0] first; kNone past the last dimension
  bool optional;
  FfnPart part;
  // Matmuls one dispatch runs together (they share an input): the matrices of
  // a layer with the same group; -1 for vectors and tensors the decoder does
  // not multiply in a group (experts, the router).
  int8_t group;
};

// How a mixture-of-experts layer picks and weighs its experts.
struct MoeSpec {
  bool renormalize = true;       // top-k weights renormalized to sum 1 (Mixtral); the
                                 // {arch}.expert_weights_norm key overrides it where present
  bool shared_expert = false;    // an always-on expert (qwen2moe)
  bool shared_gate = false;      // the shared expert is scaled by sigmoid(ffn_gate_inp_shexp . x)
};

// The counts a default may depend on (model/hparams.h has the rest).
struct ArchShape {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t n_ctx_train = 0;
};

// What an architecture assumes where its GGUF files or HF configs say
// nothing. The one path from metadata to hyper-parameters (model/hparams.h
// read_hparams) and the HF config reader (format/hf_config.h) read it, so
// neither names an architecture.
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

struct ArchSpec {
  const char* name;                    // general.architecture
  std::span<const TensorSpec> tensors; // every tensor the architecture may have
  std::span<const char* const> hf_model_types;  // config.json model_type values mapped here
  bool hf_permute_qk = false;          // HF q/k rows are rotate_half-permuted (llama family)
  NormKind norm = NormKind::kRms;
  RopeLayout rope = RopeLayout::kAdjacent;
  Activation act = Activation::kSilu;
  bool qk_norm = false;                // per-head RMSNorm of q and k before RoPE
  bool embd_scale_sqrt = false;        // embeddings scaled by sqrt(n_embd)
  bool attn_softcap = false;           // attention logits soft-capped ({arch}.attn_logit_softcapping)
  bool final_softcap = false;          // output logits soft-capped ({arch}.final_logit_softcapping)
  bool sliding_window = false;         // layers may attend over a window only ({arch}.attention.sliding_window)
  int swa_pattern = 1;                 // with a window: layer l is windowed when l % swa_pattern < swa_pattern - 1
                                       // (1: every layer; gemma2: 2, even layers; gemma3: 6, five of six)
  float swa_rope_base = 0.0f;          // RoPE base of windowed layers, unscaled (gemma3: 10000); 0: as the others
  bool hf_norm_plus_one = false;       // HF stores RMSNorm weights w for a scale of (1 + w); GGUF stores 1 + w
  // Mixture of experts: set for architectures whose FFN is routed whenever
  // {arch}.expert_count > 0 (llama: Mixtral).
  std::optional<MoeSpec> moe;
  // What its files may leave out (all empty for an architecture without any).
  ArchDefaults defaults;

  // The spec of a tensor role, or nullptr if the architecture has none.
  const TensorSpec* find(TensorRole role) const;
  // The spec a GGUF tensor name ("blk.3.attn_q.weight") stands for, or nullptr.
  const TensorSpec* find_tensor(std::string_view gguf_name) const;
};

// The architecture with this general.architecture name, or nullptr.
const ArchSpec* find_arch(std::string_view name);
// Every architecture sluice runs, in table order.
std::span<const ArchSpec* const> supported_archs();
// "llama, qwen2, ..." for messages.
std::string supported_arch_names();
// Why an architecture that is not supported is refused, when sluice knows it
// (e.g. DeepSeek's MLA attention); nullopt for names it does not know.
std::optional<std::string> refusal_reason(std::string_view name);

// The architecture an HF config.json model_type maps to, or nullptr.
const ArchSpec* find_arch_by_hf_model_type(std::string_view model_type);

// The roles a fused matrix is bound as (row slices, in row order): attn_qkv
// -> q, k, v; ffn_up (gate/up) -> gate, up. Empty for other roles.
std::span<const TensorRole> fused_parts(TensorRole role);

// Splits "blk.12.attn_q.weight" into (12, "attn_q.weight"); -1 and the whole
// name for anything else.
std::pair<int64_t, std::string> split_layer_name(std::string_view name);
// "blk.12.attn_q.weight" for a per-layer spec, the GGUF name otherwise.
std::string gguf_tensor_name(const TensorSpec& t, int64_t layer);

}  // namespace sluice
