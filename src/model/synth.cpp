#include "model/synth.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "format/gguf_writer.h"
#include "arch/tensor_class.h"
#include "model/hparams.h"
#include "model/model_weights.h"
#include "quant/quant.h"
#include "quant/quant_mix.h"

namespace sluice {
namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

constexpr std::array<const char*, 96> kWords = {
    "the", "and", "to", "a", "of", "in", "was", "he", "she", "it", "you", "that", "with", "for", "on",
    "is", "they", "his", "her", "said", "day", "one", "time", "upon", "once", "there", "little", "girl",
    "boy", "big", "play", "happy", "friend", "mom", "dad", "saw", "went", "park", "dog", "cat", "ball",
    "tree", "sun", "red", "blue", "very", "not", "but", "so", "had", "were", "an", "at", "be", "all",
    "have", "from", "we", "can", "what", "when", "up", "out", "see", "like", "go", "do", "no", "yes",
    "my", "me", "him", "them", "this", "did", "want", "wanted", "help", "look", "good", "fun", "toy",
    "home", "name", "named", "loved", "lived", "found", "made", "came", "new", "old", "small", "run",
    "jump", "sky"};

// Deterministic per-(seed, stream) generator.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Approximately normal(0, 1): sum of four uniforms, rescaled.
  float normal() {
    float acc = 0;
    for (int i = 0; i < 4; ++i) acc += static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
    return (acc - 2.0f) * 1.7320508f;
  }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The tiny shape of a windowed family (tiny-gemma2, tiny-gemma3, tiny-phi3*):
// dim 64, 4 heads of 16 (2 kv), ffn 128, a window of 8, and norm weights
// spread around 1 so that a misapplied norm shows.
SynthShape tiny_windowed(const char* name, int64_t n_layer, float rope_freq_base, const char* arch,
                         float rope_scale_linear = 0.0f, int64_t longrope_orig_ctx = 0) {
  return {.name = name, .n_vocab = 4096, .n_embd = 64, .n_layer = n_layer, .n_head = 4, .n_head_kv = 2, .n_ff = 128,
          .n_ctx = 2048, .rope_freq_base = rope_freq_base, .arch = arch, .n_swa = 8,
          .rope_scale_linear = rope_scale_linear, .norm_noise = 0.1f, .longrope_orig_ctx = longrope_orig_ctx};
}

// The presets, in the order synth_preset_names() lists them (synth.h says
// what each is).
const std::vector<SynthShape>& presets() {
  static const std::vector<SynthShape> k = {
      {.name = "tiny", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4, .n_ff = 768,
       .n_ctx = 2048, .rope_freq_base = 10000.0f},
      {.name = "110m", .n_vocab = 32000, .n_embd = 768, .n_layer = 12, .n_head = 12, .n_head_kv = 12, .n_ff = 2048,
       .n_ctx = 1024, .rope_freq_base = 10000.0f},
      // TinyLlama-1.1B
      {.name = "1b", .n_vocab = 32000, .n_embd = 2048, .n_layer = 22, .n_head = 32, .n_head_kv = 4, .n_ff = 5632,
       .n_ctx = 2048, .rope_freq_base = 10000.0f},
      // Llama-3-8B
      {.name = "8b", .n_vocab = 128256, .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8, .n_ff = 14336,
       .n_ctx = 8192, .rope_freq_base = 500000.0f},
      // Llama-3-70B layer shape
      {.name = "70b-slice", .n_vocab = 128256, .n_embd = 8192, .n_layer = 2, .n_head = 64, .n_head_kv = 8,
       .n_ff = 28672, .n_ctx = 8192, .rope_freq_base = 500000.0f},
      // Mixtral-8x7B: GGUF llama with experts
      {.name = "mixtral-8x7b", .n_vocab = 32000, .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8,
       .n_ff = 14336, .n_ctx = 32768, .rope_freq_base = 1e6f, .n_expert = 8, .n_expert_used = 2,
       .n_ff_expert = 14336},
      // Qwen1.5-MoE-A2.7B
      {.name = "qwen2moe-a2.7b", .n_vocab = 151936, .n_embd = 2048, .n_layer = 24, .n_head = 16, .n_head_kv = 16,
       .n_ff = 5632, .n_ctx = 8192, .rope_freq_base = 1e6f, .arch = "qwen2moe", .n_expert = 60,
       .n_expert_used = 4, .n_ff_expert = 1408, .n_ff_shared = 5632, .qkv_bias = true},
      // Qwen3-30B-A3B
      {.name = "qwen3-30b-a3b", .n_vocab = 151936, .n_embd = 2048, .n_layer = 48, .n_head = 32, .n_head_kv = 4,
       .n_ff = 6144, .n_ctx = 40960, .rope_freq_base = 1e6f, .arch = "qwen3moe", .head_dim = 128, .n_expert = 128,
       .n_expert_used = 8, .n_ff_expert = 768},
      {.name = "gemma2-2b", .n_vocab = 256000, .n_embd = 2304, .n_layer = 26, .n_head = 8, .n_head_kv = 4,
       .n_ff = 9216, .n_ctx = 8192, .rope_freq_base = 10000.0f, .arch = "gemma2", .head_dim = 256, .n_swa = 4096},
      {.name = "gemma2-9b", .n_vocab = 256000, .n_embd = 3584, .n_layer = 42, .n_head = 16, .n_head_kv = 8,
       .n_ff = 14336, .n_ctx = 8192, .rope_freq_base = 10000.0f, .arch = "gemma2", .head_dim = 256, .n_swa = 4096},
      {.name = "gemma3-1b", .n_vocab = 262144, .n_embd = 1152, .n_layer = 26, .n_head = 4, .n_head_kv = 1,
       .n_ff = 6912, .n_ctx = 32768, .rope_freq_base = 1e6f, .arch = "gemma3", .head_dim = 256, .n_swa = 512},
      {.name = "gemma3-4b", .n_vocab = 262144, .n_embd = 2560, .n_layer = 34, .n_head = 8, .n_head_kv = 4,
       .n_ff = 10240, .n_ctx = 131072, .rope_freq_base = 1e6f, .arch = "gemma3", .head_dim = 256, .n_swa = 1024,
       .rope_scale_linear = 8.0f},
      // Phi-3-mini-4k-instruct
      {.name = "phi3-mini", .n_vocab = 32064, .n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32,
       .n_ff = 8192, .n_ctx = 4096, .rope_freq_base = 10000.0f, .arch = "phi3", .n_swa = 2047},
      // Phi-3-mini-128k-instruct
      {.name = "phi3-mini-128k", .n_vocab = 32064, .n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32,
       .n_ff = 8192, .n_ctx = 131072, .rope_freq_base = 10000.0f, .arch = "phi3", .n_swa = 262144,
       .longrope_orig_ctx = 4096},
      {.name = "tiny-mixtral", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
       .n_ff = 512, .n_ctx = 2048, .rope_freq_base = 10000.0f, .n_expert = 8, .n_expert_used = 2,
       .n_ff_expert = 512},
      {.name = "tiny-qwen2moe", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
       .n_ff = 512, .n_ctx = 2048, .rope_freq_base = 10000.0f, .arch = "qwen2moe", .n_expert = 12,
       .n_expert_used = 4, .n_ff_expert = 256, .n_ff_shared = 512, .qkv_bias = true},
      {.name = "tiny-qwen3", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
       .n_ff = 768, .n_ctx = 2048, .rope_freq_base = 10000.0f, .arch = "qwen3", .head_dim = 64},
      {.name = "tiny-qwen3moe", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
       .n_ff = 768, .n_ctx = 2048, .rope_freq_base = 10000.0f, .arch = "qwen3moe", .head_dim = 64,
       .n_expert = 16, .n_expert_used = 4, .n_ff_expert = 256},
      tiny_windowed("tiny-gemma2", 26, 10000.0f, "gemma2"),
      tiny_windowed("tiny-gemma3", 6, 1e6f, "gemma3", /*rope_scale_linear=*/8.0f),
      tiny_windowed("tiny-phi3", 4, 10000.0f, "phi3"),
      tiny_windowed("tiny-phi3-128k", 4, 10000.0f, "phi3", 0.0f, /*longrope_orig_ctx=*/64),
      // Mistral-7B-v0.1
      {.name = "mistral-7b", .n_vocab = 32000, .n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 8,
       .n_ff = 14336, .n_ctx = 32768, .rope_freq_base = 10000.0f, .n_swa = 4096},
      {.name = "tiny-mistral", .n_vocab = 4096, .n_embd = 256, .n_layer = 4, .n_head = 8, .n_head_kv = 4,
       .n_ff = 768, .n_ctx = 2048, .rope_freq_base = 10000.0f, .n_swa = 64},
  };
  return k;
}

}  // namespace

std::vector<std::string> synth_preset_names() {
  std::vector<std::string> names;
  for (const SynthShape& s : presets()) names.push_back(s.name);
  return names;
}

StatusOr<SynthShape> synth_preset(const std::string& name, int64_t n_layer_override) {
  const auto& all = presets();
  const auto it = std::find_if(all.begin(), all.end(), [&](const SynthShape& s) { return s.name == name; });
  if (it == all.end()) {
    std::string known;
    for (const std::string& n : synth_preset_names()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("unknown synth preset '{}' (known: {})", name, known);
  }
  SynthShape s = *it;
  if (n_layer_override > 0) s.n_layer = n_layer_override;
  return s;
}

SynthVocab synth_vocab(int64_t n_vocab) {
  SynthVocab v;
  std::unordered_set<std::string> seen;  // pieces must be unique (other readers assert it)
  auto add = [&](std::string piece, int64_t type) {
    if (static_cast<int64_t>(v.tokens.size()) >= n_vocab || !seen.insert(piece).second) return;
    v.scores.push_back(type == 1 ? -static_cast<double>(v.tokens.size()) : 0.0);
    v.tokens.push_back(std::move(piece));
    v.types.push_back(type);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 6);
  add(kSpace, 1);
  for (int c = 0x21; c < 0x7f; ++c) add(std::string(1, static_cast<char>(c)), 1);
  for (int c = 0x21; c < 0x7f; ++c) add(kSpace + std::string(1, static_cast<char>(c)), 1);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (char a : letters)
    for (char b : letters) add(std::string{a, b}, 1);
  for (char a : letters)
    for (char b : letters) add(kSpace + std::string{a, b}, 1);
  for (const char* w : kWords) add(kSpace + std::string(w), 1);
  for (char a : letters)
    for (char b : letters)
      for (char c : letters) add(std::string{a, b, c}, 1);
  for (char a : letters)
    for (char b : letters)
      for (char c : letters) add(kSpace + std::string{a, b, c}, 1);
  // Large vocabularies (128k) are filled with word-start 4-grams, reachable by
  // merging a word-start trigram with a letter, so every token is real text.
  for (char a : letters)
    for (char b : letters)
      for (char c : letters)
        for (char d : letters) {
          if (static_cast<int64_t>(v.tokens.size()) >= n_vocab) return v;
          add(kSpace + std::string{a, b, c, d}, 1);
        }
  return v;
}

StatusOr<Metadata> synth_metadata(const SynthShape& s) {
  const ArchSpec* spec = find_arch(s.arch);
  if (!spec) return invalid_argument("shape {}: unknown architecture '{}' ({})", s.name, s.arch, supported_arch_names());
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0 || (s.head_dim == 0 && s.n_embd % s.n_head != 0)) {
    return invalid_argument("shape {}: heads {} / kv heads {} do not divide embedding {}", s.name, s.n_head, s.n_head_kv, s.n_embd);
  }
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  Metadata md;
  const std::string a = s.arch + ".";
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  md.set("general.architecture", MetaValue::str(s.arch));
  md.set(a + "vocab_size", u32(s.n_vocab));
  md.set(a + "context_length", u32(s.n_ctx));
  md.set(a + "embedding_length", u32(s.n_embd));
  md.set(a + "block_count", u32(s.n_layer));
  md.set(a + "feed_forward_length", u32(s.n_ff));
  md.set(a + "attention.head_count", u32(s.n_head));
  md.set(a + "attention.head_count_kv", u32(s.n_head_kv));
  if (s.head_dim > 0) {
    md.set(a + "attention.key_length", u32(head_dim));
    md.set(a + "attention.value_length", u32(head_dim));
  }
  md.set(a + "rope.dimension_count", u32(head_dim));
  md.set(a + "rope.freq_base", MetaValue::f32(s.rope_freq_base));
  md.set(a + "attention.layer_norm_rms_epsilon", MetaValue::f32(1e-5f));
  if (spec->sliding_window || s.n_swa > 0) md.set(a + "attention.sliding_window", u32(s.n_swa));
  if (spec->attn_softcap) md.set(a + "attn_logit_softcapping", MetaValue::f32(50.0f));
  if (spec->final_softcap) md.set(a + "final_logit_softcapping", MetaValue::f32(30.0f));
  if (s.rope_scale_linear > 0.0f) {
    md.set(a + "rope.scaling.type", MetaValue::str("linear"));
    md.set(a + "rope.scaling.factor", MetaValue::f32(s.rope_scale_linear));
  }
  if (s.longrope_orig_ctx > 0) {
    if (!spec->find(TensorRole::kRopeFactorsLong)) return invalid_argument("{} has no LongRoPE factors", s.arch);
    const double scale = static_cast<double>(s.n_ctx) / static_cast<double>(s.longrope_orig_ctx);
    const double attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(s.longrope_orig_ctx))) : 1.0;
    md.set(a + "rope.scaling.original_context_length", u32(s.longrope_orig_ctx));
    md.set(a + "rope.scaling.attn_factor", MetaValue::f32(static_cast<float>(attn)));
  }
  if (s.n_expert > 0) {
    md.set(a + "expert_count", u32(s.n_expert));
    md.set(a + "expert_used_count", u32(s.n_expert_used));
    md.set(a + "expert_feed_forward_length", u32(s.n_ff_expert));
    if (s.n_ff_shared > 0) md.set(a + "expert_shared_feed_forward_length", u32(s.n_ff_shared));
  }
  return md;
}

StatusOr<uint64_t> write_synth_model(const SynthOptions& o, const std::string& path) {
  const SynthShape& s = o.shape;
  ASSIGN_OR_RETURN(const QuantMix mix, quant_mix_from_name(o.type));
  ASSIGN_OR_RETURN(Metadata shape_md, synth_metadata(s));
  const ArchSpec* spec = find_arch(s.arch);
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  // A mix falls back per tensor to a 32-element type (Q5_0, Q5_1, IQ4_NL,
  // Q8_0) where a row does not split into 256-element super-blocks, as
  // llama.cpp's quantizer does (Qwen1.5-MoE's expert ffn is 1408 = 5.5 x 256).
  const int64_t bs = mix.is_mix ? 32 : dtype_traits(mix.base).block_size;
  for (int64_t d : {s.n_embd, s.n_ff, s.n_ff_expert, s.n_ff_shared, head_dim * s.n_head}) {
    if (d % bs != 0) {
      return invalid_argument("type {} needs dims divisible by {} (embedding {}, ffn {}, expert ffn {}, shared ffn {})",
                              o.type, bs, s.n_embd, s.n_ff, s.n_ff_expert, s.n_ff_shared);
    }
  }

  GgufWriter w;
  Metadata& md = w.metadata();
  md.set("general.architecture", MetaValue::str(s.arch));
  md.set("general.name", MetaValue::str(fmt::format("synth-{}-{}", s.name, o.type)));
  md.set("general.file_type", MetaValue::u32(static_cast<uint32_t>(mix.file_type)));
  for (const std::string& k : shape_md.keys()) md.set(k, *shape_md.find(k));
  SynthVocab vocab = synth_vocab(s.n_vocab);
  md.set("tokenizer.ggml.model", MetaValue::str("llama"));
  MetaArray toks{.elem_type = GgufType::kString};
  toks.strings = std::move(vocab.tokens);
  MetaArray scores{.elem_type = GgufType::kFloat32};
  scores.floats = std::move(vocab.scores);
  MetaArray types{.elem_type = GgufType::kInt32};
  types.ints = std::move(vocab.types);
  md.set("tokenizer.ggml.tokens", MetaValue::array(std::move(toks)));
  md.set("tokenizer.ggml.scores", MetaValue::array(std::move(scores)));
  md.set("tokenizer.ggml.token_type", MetaValue::array(std::move(types)));
  md.set("tokenizer.ggml.bos_token_id", MetaValue::u32(1));
  md.set("tokenizer.ggml.eos_token_id", MetaValue::u32(2));
  md.set("tokenizer.ggml.unknown_token_id", MetaValue::u32(0));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(true));
  md.set("tokenizer.ggml.add_eos_token", MetaValue::boolean(false));
  ASSIGN_OR_RETURN(const ModelHparams hp, hparams_from_metadata(md));

  auto pool = std::make_shared<ThreadPool>(o.n_threads);
  // A matrix (or stacked experts) of n_rows rows of n_in with N(0, std^2)
  // entries, each row its own stream.
  auto add_matrix = [&](const std::string& name, DType type, std::vector<int64_t> ne, float stddev) {
    const uint64_t seed = hash_name(name, o.seed);
    const int64_t n_in = ne[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
    return w.add_tensor(name, type, std::move(ne), [=](uint8_t* dst, size_t /*n_bytes*/) {
      const size_t rb = row_bytes(type, n_in);
      pool->run_on_all([&](int ti, int nt) {
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t r = ti; r < n_rows; r += nt) {
          SplitMix rng{seed ^ (static_cast<uint64_t>(r) * 0xd1b54a32d192ed03ull)};
          for (auto& x : row) x = rng.normal() * stddev;
          quantize_row(type, row.data(), dst + static_cast<size_t>(r) * rb, n_in);
        }
      });
    });
  };
  // Norm weights are ones (plus the shape's norm_noise); other vectors
  // (biases, the shared expert's gate) small noise.
  auto add_vector = [&](const std::string& name, int64_t n, bool norm) {
    const uint64_t seed = hash_name(name, o.seed);
    const float noise = s.norm_noise;
    return w.add_tensor(name, DType::kF32, {n}, [=](uint8_t* dst, size_t) {
      float* f = reinterpret_cast<float*>(dst);
      SplitMix rng{seed};
      for (int64_t i = 0; i < n; ++i) {
        if (!norm) f[i] = 0.02f * rng.normal();
        else f[i] = noise > 0.0f ? 1.0f + noise * rng.normal() : 1.0f;
      }
    });
  };
  // The type of a matrix: routers stay f32; others as the type or llama.cpp
  // mix named by o.type chooses (quant/quant_mix.h, docs/QUANT_MIXES.md).
  auto type_of = [&](const TensorSpec& t, const std::string& name, int64_t ne0) {
    if (tensor_class(t.role) == TensorClass::kRouter) return DType::kF32;
    DType type = mix.base;
    quant_mix_type(mix, MixTensor{.name = name, .arch = spec, .ne0 = ne0, .n_layer = s.n_layer,
                                  .n_gqa = s.n_head / s.n_head_kv},
                   &type);  // the dims check above makes every choice fit
    return type;
  };
  auto add = [&](const TensorSpec& t, int64_t layer) -> Status {
    const bool bias = t.role == TensorRole::kAttnQBias || t.role == TensorRole::kAttnKBias ||
                      t.role == TensorRole::kAttnVBias;
    if (t.optional && t.role != TensorRole::kOutput && !(bias && s.qkv_bias)) return Status();
    const std::string name = gguf_tensor_name(t, layer);
    std::vector<int64_t> ne;
    for (Dim d : t.ne)
      if (d != Dim::kNone) ne.push_back(hp.dim(d));
    if (t.kind == TensorKind::kVector) {
      const bool norm = t.role == TensorRole::kAttnNorm || t.role == TensorRole::kFfnNorm ||
                        t.role == TensorRole::kOutputNorm || t.role == TensorRole::kAttnQNorm ||
                        t.role == TensorRole::kAttnKNorm || t.role == TensorRole::kAttnPostNorm ||
                        t.role == TensorRole::kFfnPostNorm;
      return add_vector(name, ne[0], norm);
    }
    // Embeddings N(0, 1); an architecture that scales them by sqrt(n_embd)
    // (gemma) gets N(0, 1/n_embd), so the scaled rows have unit RMS as in its
    // real checkpoints (and the tied head's logits the size they have there).
    const float embd_std = spec->embd_scale_sqrt ? 1.0f / std::sqrt(static_cast<float>(s.n_embd)) : 1.0f;
    const float stddev = t.role == TensorRole::kTokenEmbd ? embd_std : 1.0f / std::sqrt(static_cast<float>(ne[0]));
    const DType type = type_of(t, name, ne[0]);
    return add_matrix(name, type, std::move(ne), stddev);
  };
  for (const TensorSpec& t : spec->tensors)
    if (!t.per_layer) RETURN_IF_ERROR(add(t, -1));
  if (s.longrope_orig_ctx > 0) {
    // Increasing in the pair index (slow pairs are stretched most), with noise.
    const int64_t half = head_dim / 2;
    const double long_max = 2.0 * static_cast<double>(s.n_ctx) / static_cast<double>(s.longrope_orig_ctx);
    for (const bool is_long : {true, false}) {
      const std::string name = is_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
      const uint64_t seed = hash_name(name, o.seed);
      RETURN_IF_ERROR(w.add_tensor(name, DType::kF32, {half}, [=](uint8_t* dst, size_t) {
        float* f = reinterpret_cast<float*>(dst);
        SplitMix rng{seed};
        for (int64_t i = 0; i < half; ++i) {
          const double x = half > 1 ? static_cast<double>(i) / static_cast<double>(half - 1) : 0.0;
          const double base = is_long ? std::exp(std::log(long_max) * x * x) : 1.0 + 1.7 * std::pow(x, 1.5);
          f[i] = static_cast<float>(base * (1.0 + 0.02 * std::abs(rng.normal())));
        }
      }));
    }
  }
  for (int64_t l = 0; l < s.n_layer; ++l)
    for (const TensorSpec& t : spec->tensors)
      if (t.per_layer && applies_to_layer(t, hp, l)) RETURN_IF_ERROR(add(t, l));
  RETURN_IF_ERROR(w.write(path, o.progress));
  return w.total_tensor_bytes();
}

}  // namespace sluice
