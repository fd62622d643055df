#include "model/synth.h"

#include <array>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "base/thread_pool.h"
#include "format/gguf_writer.h"
#include "quant/quant.h"

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

// llama.cpp's file type ids, so other tools label synth files correctly.
int64_t file_type_id(const std::string& type) {
  if (type == "f32") return 0;
  if (type == "f16") return 1;
  if (type == "q4_0") return 2;
  if (type == "q8_0") return 7;
  if (type == "q4_k") return 14;  // Q4_K_S
  if (type == "q4_k_m") return 15;
  if (type == "q6_k") return 18;
  if (type == "bf16") return 32;
  return 0;
}

bool use_more_bits(int64_t layer, int64_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

}  // namespace

std::vector<std::string> synth_preset_names() { return {"tiny", "110m", "1b", "8b", "70b-slice"}; }

StatusOr<SynthShape> synth_preset(const std::string& name, int64_t n_layer_override) {
  SynthShape s;
  s.name = name;
  if (name == "tiny") {
    s = {name, 4096, 256, 4, 8, 4, 768, 2048, 10000.0f};
  } else if (name == "110m") {
    s = {name, 32000, 768, 12, 12, 12, 2048, 1024, 10000.0f};
  } else if (name == "1b") {  // TinyLlama-1.1B
    s = {name, 32000, 2048, 22, 32, 4, 5632, 2048, 10000.0f};
  } else if (name == "8b") {  // Llama-3-8B
    s = {name, 128256, 4096, 32, 32, 8, 14336, 8192, 500000.0f};
  } else if (name == "70b-slice") {  // Llama-3-70B layer shape
    s = {name, 128256, 8192, 2, 64, 8, 28672, 8192, 500000.0f};
  } else {
    return invalid_argument("unknown synth preset '{}' (known: tiny, 110m, 1b, 8b, 70b-slice)", name);
  }
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

StatusOr<uint64_t> write_synth_model(const SynthOptions& o, const std::string& path) {
  const SynthShape& s = o.shape;
  const bool mix = o.type == "q4_k_m";
  std::optional<DType> base = mix ? DType::kQ4_K : dtype_from_name(o.type);
  if (!base) return invalid_argument("unknown weight type '{}' (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m)", o.type);
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_head_kv != 0) {
    return invalid_argument("shape {}: heads {} / kv heads {} do not divide embedding {}", s.name, s.n_head, s.n_head_kv, s.n_embd);
  }
  const int64_t bs = dtype_traits(*base).block_size;
  if (s.n_embd % bs != 0 || s.n_ff % bs != 0) {
    return invalid_argument("type {} needs dims divisible by {} (embedding {}, ffn {})", o.type, bs, s.n_embd, s.n_ff);
  }
  const int64_t head_dim = s.n_embd / s.n_head;
  const int64_t n_embd_kv = head_dim * s.n_head_kv;

  GgufWriter w;
  Metadata& md = w.metadata();
  md.set("general.architecture", MetaValue::str("llama"));
  md.set("general.name", MetaValue::str(fmt::format("synth-{}-{}", s.name, o.type)));
  md.set("general.file_type", MetaValue::u32(static_cast<uint32_t>(file_type_id(o.type))));
  md.set("llama.vocab_size", MetaValue::u32(static_cast<uint32_t>(s.n_vocab)));
  md.set("llama.context_length", MetaValue::u32(static_cast<uint32_t>(s.n_ctx)));
  md.set("llama.embedding_length", MetaValue::u32(static_cast<uint32_t>(s.n_embd)));
  md.set("llama.block_count", MetaValue::u32(static_cast<uint32_t>(s.n_layer)));
  md.set("llama.feed_forward_length", MetaValue::u32(static_cast<uint32_t>(s.n_ff)));
  md.set("llama.attention.head_count", MetaValue::u32(static_cast<uint32_t>(s.n_head)));
  md.set("llama.attention.head_count_kv", MetaValue::u32(static_cast<uint32_t>(s.n_head_kv)));
  md.set("llama.rope.dimension_count", MetaValue::u32(static_cast<uint32_t>(head_dim)));
  md.set("llama.rope.freq_base", MetaValue::f32(s.rope_freq_base));
  md.set("llama.attention.layer_norm_rms_epsilon", MetaValue::f32(1e-5f));
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

  auto pool = std::make_shared<ThreadPool>(o.n_threads);
  // A matrix [n_out rows of n_in] with N(0, std^2) entries, each row its own stream.
  auto add_matrix = [&](const std::string& name, DType type, int64_t n_in, int64_t n_out, float stddev) {
    const uint64_t seed = hash_name(name, o.seed);
    return w.add_tensor(name, type, {n_in, n_out}, [=](uint8_t* dst, size_t /*n_bytes*/) {
      const size_t rb = row_bytes(type, n_in);
      pool->run_on_all([&](int ti, int nt) {
        std::vector<float> row(static_cast<size_t>(n_in));
        for (int64_t r = ti; r < n_out; r += nt) {
          SplitMix rng{seed ^ (static_cast<uint64_t>(r) * 0xd1b54a32d192ed03ull)};
          for (auto& x : row) x = rng.normal() * stddev;
          quantize_row(type, row.data(), dst + static_cast<size_t>(r) * rb, n_in);
        }
      });
    });
  };
  auto add_norm = [&](const std::string& name, int64_t n) {
    return w.add_tensor(name, DType::kF32, {n}, [=](uint8_t* dst, size_t) {
      float* f = reinterpret_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) f[i] = 1.0f;
    });
  };

  const float std_in = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const float std_ff = 1.0f / std::sqrt(static_cast<float>(s.n_ff));
  RETURN_IF_ERROR(add_matrix("token_embd.weight", *base, s.n_embd, s.n_vocab, 1.0f));
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const DType more = mix && use_more_bits(l, s.n_layer) ? DType::kQ6_K : *base;
    RETURN_IF_ERROR(add_norm(p + "attn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(add_matrix(p + "attn_q.weight", *base, s.n_embd, s.n_embd, std_in));
    RETURN_IF_ERROR(add_matrix(p + "attn_k.weight", *base, s.n_embd, n_embd_kv, std_in));
    RETURN_IF_ERROR(add_matrix(p + "attn_v.weight", more, s.n_embd, n_embd_kv, std_in));
    RETURN_IF_ERROR(add_matrix(p + "attn_output.weight", *base, s.n_embd, s.n_embd, std_in));
    RETURN_IF_ERROR(add_norm(p + "ffn_norm.weight", s.n_embd));
    RETURN_IF_ERROR(add_matrix(p + "ffn_gate.weight", *base, s.n_embd, s.n_ff, std_in));
    RETURN_IF_ERROR(add_matrix(p + "ffn_down.weight", more, s.n_ff, s.n_embd, std_ff));
    RETURN_IF_ERROR(add_matrix(p + "ffn_up.weight", *base, s.n_embd, s.n_ff, std_in));
  }
  RETURN_IF_ERROR(add_norm("output_norm.weight", s.n_embd));
  RETURN_IF_ERROR(add_matrix("output.weight", mix ? DType::kQ6_K : *base, s.n_embd, s.n_vocab, std_in));
  RETURN_IF_ERROR(w.write(path, o.progress));
  return w.total_tensor_bytes();
}

}  // namespace sluice
