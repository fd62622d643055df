#include "format/llama2c.h"

#include "arch/arch_spec.h"

#include <cstring>
#include <memory>

#include "base/mapped_file.h"

namespace sluice {
namespace {

constexpr uint32_t kV1Magic = 0x616b3432;  // "ak42"
constexpr uint64_t kLegacyHeaderBytes = 7 * 4;
constexpr uint64_t kV1HeaderBytes = 256;
constexpr int32_t kMaxTokenLength = 1 << 16;

struct Llama2cConfig {
  int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;
};

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

Status validate_config(const Llama2cConfig& c, const std::string& name) {
  // Caps far above any llama2.c model keep every size product below 2^50.
  struct Field {
    const char* name;
    int64_t value, max;
  };
  const Field fields[] = {{"dim", c.dim, 1 << 18},           {"hidden_dim", c.hidden_dim, 1 << 18},
                          {"n_layers", c.n_layers, 1 << 12}, {"n_heads", c.n_heads, 1 << 12},
                          {"n_kv_heads", c.n_kv_heads, 1 << 12},
                          {"vocab_size", c.vocab_size, 1 << 21}, {"seq_len", c.seq_len, 1 << 24}};
  for (const Field& f : fields) {
    if (f.value <= 0 || f.value > f.max) {
      return data_loss("{}: header field {} is {}, expected 1..{}", name, f.name, f.value, f.max);
    }
  }
  if (c.dim % c.n_heads != 0 || (c.dim / c.n_heads) % 2 != 0) {
    return data_loss("{}: dim {} does not split into {} heads of even size", name, c.dim,
                     c.n_heads);
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    return data_loss("{}: n_heads {} is not a multiple of n_kv_heads {}", name, c.n_heads,
                     c.n_kv_heads);
  }
  return Status::ok_status();
}

// Float offsets of the stacked weight arrays, in elements from the data start.
struct Layout {
  uint64_t tok_emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;
  uint64_t end;         // elements, without the optional freq_cis block
  uint64_t freq_cis;    // elements of the optional freq_cis block (legacy only)
};

Layout plan_layout(const Llama2cConfig& c, bool v1) {
  // validate_config() caps the hyper-parameters, so nothing below overflows.
  const uint64_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers, vocab = c.vocab_size;
  const uint64_t kv_dim = dim * c.n_kv_heads / c.n_heads;
  const uint64_t head_dim = dim / c.n_heads;
  Layout l{};
  uint64_t at = 0;
  auto take = [&at](uint64_t n) {
    const uint64_t start = at;
    at += n;
    return start;
  };
  if (v1) {
    l.rms_att = take(L * dim);
    l.rms_ffn = take(L * dim);
    l.rms_final = take(dim);
    l.tok_emb = take(vocab * dim);
  } else {
    l.tok_emb = take(vocab * dim);
    l.rms_att = take(L * dim);
  }
  l.wq = take(L * dim * dim);
  l.wk = take(L * kv_dim * dim);
  l.wv = take(L * kv_dim * dim);
  l.wo = take(L * dim * dim);
  if (!v1) l.rms_ffn = take(L * dim);
  l.w1 = take(L * hidden * dim);
  l.w2 = take(L * dim * hidden);
  l.w3 = take(L * hidden * dim);
  if (!v1) l.rms_final = take(dim);
  l.freq_cis = v1 ? 0 : 2 * static_cast<uint64_t>(c.seq_len) * (head_dim / 2);
  l.wcls = at;  // moved past freq_cis by the caller if that block is present
  l.end = at + (c.shared_classifier ? 0 : vocab * dim);
  return l;
}

void set_hparams(const Llama2cConfig& c, const std::string& model_name, Metadata* md) {
  auto u32 = [](int64_t v) { return MetaValue::u32(static_cast<uint32_t>(v)); };
  md->set("general.architecture", MetaValue::str("llama"));
  md->set("general.name", MetaValue::str(model_name));
  md->set("llama.context_length", u32(c.seq_len));
  md->set("llama.embedding_length", u32(c.dim));
  md->set("llama.block_count", u32(c.n_layers));
  md->set("llama.feed_forward_length", u32(c.hidden_dim));
  md->set("llama.attention.head_count", u32(c.n_heads));
  md->set("llama.attention.head_count_kv", u32(c.n_kv_heads));
  md->set("llama.attention.layer_norm_rms_epsilon", MetaValue::f32(1e-5f));
  md->set("llama.rope.freq_base", MetaValue::f32(10000.0f));
  md->set("llama.rope.dimension_count", u32(c.dim / c.n_heads));
  md->set("llama.vocab_size", u32(c.vocab_size));
}

std::string stem(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

bool is_byte_token(const std::string& s) {
  auto hex = [](char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

}  // namespace

Status import_llama2c_tokenizer(const uint8_t* data, size_t size, const std::string& name,
                                int64_t n_vocab, Metadata* md) {
  if (size < 4) return data_loss("{}: {} bytes, too short for a llama2.c tokenizer", name, size);
  const int32_t max_len = load_i32(data);
  if (max_len <= 0 || max_len > kMaxTokenLength) {
    return data_loss("{}: max_token_length is {}, expected 1..{}", name, max_len,
                     kMaxTokenLength);
  }
  // Each record takes at least 8 bytes: refuse a vocabulary the file cannot hold.
  if (n_vocab <= 0 || static_cast<uint64_t>(n_vocab) > (size - 4) / 8) {
    return data_loss("{}: {} bytes cannot hold {} tokens", name, size, n_vocab);
  }
  MetaArray tokens, scores, types;
  tokens.elem_type = GgufType::kString;
  scores.elem_type = GgufType::kFloat32;
  types.elem_type = GgufType::kInt32;
  tokens.strings.reserve(n_vocab);
  scores.floats.reserve(n_vocab);
  types.ints.reserve(n_vocab);
  uint64_t pos = 4;
  for (int64_t id = 0; id < n_vocab; ++id) {
    if (size - pos < 8) {
      return data_loss("{}: truncated at byte {} in token {} of {}", name, pos, id, n_vocab);
    }
    float score;
    std::memcpy(&score, data + pos, 4);
    const int32_t len = load_i32(data + pos + 4);
    pos += 8;
    if (len < 0 || len > max_len) {
      return data_loss("{}: token {} has length {}, expected 0..{} (max_token_length)", name, id,
                       len, max_len);
    }
    if (static_cast<uint64_t>(len) > size - pos) {
      return data_loss("{}: token {} of length {} at byte {} runs past the end of the file", name,
                       id, len, pos);
    }
    std::string raw(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(len));
    pos += static_cast<uint64_t>(len);
    std::string piece;
    if (raw == "\n<s>\n") {
      piece = "<s>";
    } else if (raw == "\n</s>\n") {
      piece = "</s>";
    } else {
      piece.reserve(raw.size());
      for (char ch : raw) {
        if (ch == ' ') piece += "\xe2\x96\x81";  // U+2581
        else piece += ch;
      }
    }
    int64_t type = 1;  // normal
    if (piece == "<unk>") type = 2;
    else if (piece == "<s>" || piece == "</s>") type = 3;
    else if (is_byte_token(piece)) type = 6;
    tokens.strings.push_back(std::move(piece));
    scores.floats.push_back(score);
    types.ints.push_back(type);
  }
  if (pos != size) {
    return data_loss("{}: {} bytes left over after {} tokens", name, size - pos, n_vocab);
  }
  md->set("tokenizer.ggml.model", MetaValue::str("llama"));
  md->set("tokenizer.ggml.tokens", MetaValue::array(std::move(tokens)));
  md->set("tokenizer.ggml.scores", MetaValue::array(std::move(scores)));
  md->set("tokenizer.ggml.token_type", MetaValue::array(std::move(types)));
  md->set("tokenizer.ggml.bos_token_id", MetaValue::u32(1));
  md->set("tokenizer.ggml.eos_token_id", MetaValue::u32(2));
  md->set("tokenizer.ggml.unknown_token_id", MetaValue::u32(0));
  md->set("tokenizer.ggml.add_bos_token", MetaValue::boolean(true));
  md->set("tokenizer.ggml.add_eos_token", MetaValue::boolean(false));
  return Status::ok_status();
}

StatusOr<ModelFile> import_llama2c(const std::string& checkpoint_path,
                                   const std::string& tokenizer_bin_path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(checkpoint_path));
  auto mapping = std::make_shared<MappedFile>(std::move(mapped));
  ASSIGN_OR_RETURN(MappedFile tok, MappedFile::open(tokenizer_bin_path));
  ASSIGN_OR_RETURN(ModelFile mf, parse_llama2c(mapping->data(), mapping->size(), checkpoint_path, tok.data(),
                                               tok.size(), tokenizer_bin_path));
  mf.hold(std::move(mapping));
  return mf;
}

StatusOr<ModelFile> parse_llama2c(const uint8_t* data, uint64_t size, const std::string& name,
                                  const uint8_t* tokenizer, size_t tokenizer_size, const std::string& tokenizer_name) {
  if (size < kLegacyHeaderBytes) {
    return data_loss("{}: {} bytes, too short for a llama2.c checkpoint", name, size);
  }

  const bool v1 = static_cast<uint32_t>(load_i32(data)) == kV1Magic;
  Llama2cConfig c{};
  uint64_t data_start = kLegacyHeaderBytes;
  const uint8_t* h = data;
  if (v1) {
    if (size < kV1HeaderBytes) return data_loss("{}: truncated version-1 header", name);
    const int32_t version = load_i32(data + 4);
    if (version != 1) {
      return unimplemented("{}: llama2.c export version {} is not supported (legacy and 1 are)",
                           name, version);
    }
    h = data + 8;
    data_start = kV1HeaderBytes;
  }
  c.dim = load_i32(h);
  c.hidden_dim = load_i32(h + 4);
  c.n_layers = load_i32(h + 8);
  c.n_heads = load_i32(h + 12);
  c.n_kv_heads = load_i32(h + 16);
  c.vocab_size = load_i32(h + 20);
  c.seq_len = load_i32(h + 24);
  if (v1) {
    const uint8_t shared = data[36];
    if (shared > 1) return data_loss("{}: shared_classifier flag is {}", name, shared);
    c.shared_classifier = shared == 1;
  } else {
    c.shared_classifier = c.vocab_size > 0;
    c.vocab_size = c.vocab_size < 0 ? -c.vocab_size : c.vocab_size;  // int64: no overflow
  }
  RETURN_IF_ERROR(validate_config(c, name));

  Layout l = plan_layout(c, v1);
  const uint64_t body_bytes = size - data_start;
  const uint64_t without_freq = l.end * 4;
  const uint64_t with_freq = (l.end + l.freq_cis) * 4;
  if (!v1 && body_bytes == with_freq && l.freq_cis != 0) {
    l.wcls += l.freq_cis;
  } else if (body_bytes != without_freq) {
    if (v1) {
      return data_loss("{}: file is {} bytes, but the header implies {}", name, size,
                       data_start + without_freq);
    }
    return data_loss("{}: file is {} bytes, but the header implies {} (or {} with freq_cis)",
                     name, size, data_start + without_freq, data_start + with_freq);
  }

  ModelFile mf;
  mf.source_path = name;
  mf.format = "llama2c";
  set_hparams(c, stem(name), &mf.metadata);
  RETURN_IF_ERROR(import_llama2c_tokenizer(tokenizer, tokenizer_size, tokenizer_name, c.vocab_size, &mf.metadata));

  const int64_t dim = c.dim, hidden = c.hidden_dim;
  const int64_t kv_dim = dim * c.n_kv_heads / c.n_heads;
  // Adds the tensor of a llama role (its GGUF name from the llama table) at
  // float offset `elem` (from the data start) of shape ne.
  const ArchSpec& llama = *find_arch("llama");
  auto add = [&](TensorRole role, int64_t layer, uint64_t elem, std::vector<int64_t> ne) {
    TensorInfo t;
    t.name = gguf_tensor_name(*llama.find(role), layer);
    t.type = DType::kF32;
    t.ne = std::move(ne);
    t.n_bytes = static_cast<uint64_t>(t.n_elements()) * 4;
    t.file_offset = static_cast<int64_t>(data_start + elem * 4);
    t.data = data + t.file_offset;
    mf.tensors.push_back(std::move(t));
  };
  using R = TensorRole;
  add(R::kTokenEmbd, -1, l.tok_emb, {dim, c.vocab_size});
  add(R::kOutputNorm, -1, l.rms_final, {dim});
  if (!c.shared_classifier) add(R::kOutput, -1, l.wcls, {dim, c.vocab_size});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const uint64_t li = static_cast<uint64_t>(i);
    add(R::kAttnQ, i, l.wq + li * dim * dim, {dim, dim});
    add(R::kAttnK, i, l.wk + li * kv_dim * dim, {dim, kv_dim});
    add(R::kAttnV, i, l.wv + li * kv_dim * dim, {dim, kv_dim});
    add(R::kAttnOutput, i, l.wo + li * dim * dim, {dim, dim});
    add(R::kAttnNorm, i, l.rms_att + li * dim, {dim});
    add(R::kFfnGate, i, l.w1 + li * hidden * dim, {dim, hidden});
    add(R::kFfnDown, i, l.w2 + li * dim * hidden, {hidden, dim});
    add(R::kFfnUp, i, l.w3 + li * hidden * dim, {dim, hidden});
    add(R::kFfnNorm, i, l.rms_ffn + li * dim, {dim});
  }
  return mf;
}

}  // namespace sluice
