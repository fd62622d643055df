#include "tokenizer/vocab.h"

#include <algorithm>
#include <cfloat>

#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/unicode.h"

namespace sluice {

namespace {

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";
constexpr const char* kCharsmapKey = "tokenizer.ggml.precompiled_charsmap";

struct ModelName {
  const char* name;
  VocabModel model;
};
constexpr ModelName kModelNames[] = {
    {"llama", VocabModel::kSpm}, {"gpt2", VocabModel::kBpe}, {"bert", VocabModel::kWpm},
    {"t5", VocabModel::kUgm},    {"rwkv", VocabModel::kRwkv},
};

// Per-model defaults of the special ids and flags, as llama.cpp's loader sets them
// before reading the keys.
struct ModelDefaults {
  int32_t bos = -1, eos = -1, unk = -1, sep = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
};
ModelDefaults defaults_for(VocabModel model) {
  switch (model) {
    case VocabModel::kSpm:
      return {.bos = 1, .eos = 2, .unk = 0, .add_bos = true, .add_space_prefix = true};
    case VocabModel::kBpe:
      return {};
    case VocabModel::kWpm:
      return {.bos = 101, .unk = 100, .sep = 102, .pad = 0, .add_bos = true};
    case VocabModel::kUgm:
      return {.eos = 1, .unk = 2, .pad = 0, .add_eos = true};
    case VocabModel::kRwkv:
      return {};
  }
  return {};
}

// A key that, when present, must hold an integer.
StatusOr<std::optional<int64_t>> int_key(const Metadata& md, const char* key) {
  if (!md.has(key)) return std::optional<int64_t>();
  const std::optional<int64_t> v = md.get_int(key);
  if (!v) return data_loss("{} is a {}, expected an integer", key, gguf_type_name(md.find(key)->type));
  return v;
}

// A key that, when present, must hold a bool (or an integer read as one).
StatusOr<std::optional<bool>> bool_key(const Metadata& md, const char* key) {
  if (!md.has(key)) return std::optional<bool>();
  const std::optional<bool> v = md.get_bool(key);
  if (!v) return data_loss("{} is a {}, expected a bool", key, gguf_type_name(md.find(key)->type));
  return v;
}

// Texts that end a turn in common chat formats, beyond the declared eos/eot/eom.
constexpr const char* kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "<｜end▁of▁sentence｜>",
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xHH>" -> HH, else -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string merge_key(std::string_view left, std::string_view right) {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key.push_back('\0');
  key.append(right);
  return key;
}

}  // namespace

const char* vocab_model_name(VocabModel model) {
  for (const ModelName& m : kModelNames) {
    if (m.model == model) return m.name;
  }
  return "?";
}

StatusOr<Vocab> Vocab::load(const Metadata& md) {
  Vocab v;
  if (!md.has(kModelKey)) return not_found("{} is missing (no tokenizer in this model)", kModelKey);
  const std::optional<std::string> model = md.get_string(kModelKey);
  if (!model) return data_loss("{} is a {}, expected a string", kModelKey, gguf_type_name(md.find(kModelKey)->type));
  const ModelName* found = nullptr;
  for (const ModelName& m : kModelNames) {
    if (*model == m.name) found = &m;
  }
  if (!found) {
    return unimplemented("tokenizer model '{}' is not supported (supported: llama, gpt2, bert, t5, rwkv)", *model);
  }
  v.model_ = found->model;
  v.pre_ = md.get_string("tokenizer.ggml.pre").value_or("");
  RETURN_IF_ERROR(v.load_arrays(md));
  if (v.model_ == VocabModel::kBpe) RETURN_IF_ERROR(v.load_merges(md));
  if (v.model_ == VocabModel::kUgm) RETURN_IF_ERROR(v.load_charsmap(md));
  RETURN_IF_ERROR(v.load_specials(md));
  v.build_byte_tokens();
  return v;
}

Status Vocab::load_arrays(const Metadata& md) {
  const MetaArray* tokens = md.get_array(kTokensKey);
  if (!tokens || tokens->elem_type != GgufType::kString) {
    return data_loss("{} is missing or not an array of strings", kTokensKey);
  }
  if (tokens->strings.empty()) return data_loss("{} is empty", kTokensKey);
  if (tokens->strings.size() > static_cast<size_t>(INT32_MAX)) {
    return data_loss("{} has too many entries ({})", kTokensKey, tokens->strings.size());
  }
  texts_ = tokens->strings;
  const size_t n = texts_.size();

  for (const char* key : {kScoresKey, kTypesKey}) {
    if (md.has(key) && !md.get_array(key)) {
      return data_loss("{} is a {}, expected an array", key, gguf_type_name(md.find(key)->type));
    }
  }
  scores_.assign(n, 0.0f);
  if (const MetaArray* scores = md.get_array(kScoresKey)) {
    if (scores->size() != n) {
      return data_loss("{} has {} entries, expected {}", kScoresKey, scores->size(), n);
    }
    if (scores->floats.size() == n) {
      for (size_t i = 0; i < n; ++i) {
        // float64 scores beyond the float range saturate (their conversion is undefined).
        scores_[i] = static_cast<float>(std::clamp(scores->floats[i], -double{FLT_MAX}, double{FLT_MAX}));
      }
    } else if (scores->ints.size() == n) {
      for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(scores->ints[i]);
    } else {
      return data_loss("{} is an array of {}, expected numbers", kScoresKey, gguf_type_name(scores->elem_type));
    }
  }

  types_.assign(n, TokenType::kNormal);
  if (const MetaArray* types = md.get_array(kTypesKey)) {
    if (types->size() != n || types->ints.size() != n) {
      return data_loss("{} must be {} integers", kTypesKey, n);
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->ints[i];
      if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
        return data_loss("{}[{}] = {} is not a token type", kTypesKey, i, t);
      }
      types_[i] = static_cast<TokenType>(t);
    }
  } else if (model_ == VocabModel::kSpm || model_ == VocabModel::kUgm) {
    // Without declared types, recognize the SentencePiece byte pieces by spelling.
    for (size_t i = 0; i < n; ++i) {
      if (parse_byte_token(texts_[i]) >= 0) types_[i] = TokenType::kByte;
    }
  }

  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) ids_.emplace(texts_[i], static_cast<int32_t>(i));
  return Status::ok_status();
}

Status Vocab::load_merges(const Metadata& md) {
  const MetaArray* merges = md.get_array(kMergesKey);
  if (!merges || merges->elem_type != GgufType::kString) {
    return data_loss("{} is missing or not an array of strings (required for gpt2)", kMergesKey);
  }
  merge_ranks_.reserve(merges->strings.size());
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string& m = merges->strings[i];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= m.size()) {
      return data_loss("{}[{}] = '{}' is not two pieces separated by a space", kMergesKey, i, m);
    }
    merge_ranks_.emplace(merge_key(std::string_view(m).substr(0, space),
                                   std::string_view(m).substr(space + 1)),
                         static_cast<int32_t>(i));
  }
  return Status::ok_status();
}

Status Vocab::load_charsmap(const Metadata& md) {
  if (!md.has(kCharsmapKey)) return Status::ok_status();
  const MetaArray* arr = md.get_array(kCharsmapKey);
  if (!arr || (arr->elem_type != GgufType::kUint8 && arr->elem_type != GgufType::kInt8)) {
    return data_loss("{} must be an array of uint8 (bytes)", kCharsmapKey);
  }
  precompiled_charsmap_.reserve(arr->ints.size());
  for (const int64_t b : arr->ints) precompiled_charsmap_.push_back(static_cast<uint8_t>(b));
  return Status::ok_status();
}

Status Vocab::load_specials(const Metadata& md) {
  const ModelDefaults def = defaults_for(model_);
  Status status = Status::ok_status();
  const auto id_or = [&](std::initializer_list<const char*> keys, int32_t fallback) -> int32_t {
    for (const char* key : keys) {
      StatusOr<std::optional<int64_t>> v = int_key(md, key);
      if (!v.ok()) {
        status = v.status();
        return -1;
      }
      // Out-of-range ids (GGUF writers use 0xFFFFFFFF for "none") mean none.
      if (*v) return **v >= 0 && **v < n_vocab() ? static_cast<int32_t>(**v) : -1;
    }
    return valid(fallback) ? fallback : -1;
  };
  const auto flag_or = [&](const char* key, bool fallback) -> bool {
    StatusOr<std::optional<bool>> v = bool_key(md, key);
    if (!v.ok()) {
      status = v.status();
      return fallback;
    }
    return v->value_or(fallback);
  };
  // BERT converters name [CLS] as cls_token_id; it is the BOS of a "bert" vocab.
  bos_id_ = id_or({"tokenizer.ggml.bos_token_id", "tokenizer.ggml.cls_token_id"}, def.bos);
  eos_id_ = id_or({"tokenizer.ggml.eos_token_id"}, def.eos);
  unk_id_ = id_or({"tokenizer.ggml.unknown_token_id"}, def.unk);
  sep_id_ = id_or({"tokenizer.ggml.seperator_token_id"}, def.sep);  // sic, the GGUF key's spelling
  pad_id_ = id_or({"tokenizer.ggml.padding_token_id"}, def.pad);
  eot_id_ = id_or({"tokenizer.ggml.eot_token_id"}, -1);
  eom_id_ = id_or({"tokenizer.ggml.eom_token_id"}, -1);

  // The pre-tokenizer name sets BPE defaults (unknown names are refused by the
  // Tokenizer); an importer may state ignore_merges explicitly.
  const PreName* pre = model_ == VocabModel::kBpe ? find_pre_name(pre_) : nullptr;
  ignore_merges_ = model_ == VocabModel::kBpe && flag_or(kIgnoreMergesKey, pre && pre->ignore_merges);
  add_bos_ = flag_or("tokenizer.ggml.add_bos_token", def.add_bos || (pre && pre->add_bos));
  add_eos_ = flag_or("tokenizer.ggml.add_eos_token", def.add_eos);
  add_space_prefix_ = flag_or("tokenizer.ggml.add_space_prefix", def.add_space_prefix);
  // As llama.cpp decides it: byte-level BPE by the pre-tokenizer name's flag,
  // WordPiece always, SentencePiece, unigram and RWKV never.
  clean_spaces_ = (model_ == VocabModel::kBpe && (pre == nullptr || pre->clean_spaces)) || model_ == VocabModel::kWpm;
  remove_extra_whitespaces_ = flag_or("tokenizer.ggml.remove_extra_whitespaces", false);
  RETURN_IF_ERROR(status);
  if (add_bos_ && bos_id_ < 0) add_bos_ = false;
  if (add_eos_ && eos_id_ < 0) add_eos_ = false;

  for (int32_t id = 0; id < n_vocab(); ++id) {
    const TokenType t = types_[id];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        !texts_[id].empty()) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return texts_[a].size() > texts_[b].size();
  });

  for (int32_t id : {eos_id_, eot_id_, eom_id_}) {
    if (id >= 0) eog_ids_.push_back(id);
  }
  for (const char* text : kEndOfTurnTexts) {
    const int32_t id = find(text);
    if (id >= 0 && std::find(eog_ids_.begin(), eog_ids_.end(), id) == eog_ids_.end()) {
      eog_ids_.push_back(id);
    }
  }
  return Status::ok_status();
}

void Vocab::build_byte_tokens() {
  for (int b = 0; b < 256; ++b) {
    int32_t id = -1;
    if (model_ == VocabModel::kSpm || model_ == VocabModel::kUgm) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', '\0'};
      id = find(name);
      if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    } else if (model_ == VocabModel::kBpe) {
      id = find(byte_level_encode(std::string(1, static_cast<char>(b))));
    }
    byte_tokens_[b] = id;
  }
}

int32_t Vocab::find(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

int32_t Vocab::merge_rank(std::string_view left, std::string_view right) const {
  const auto it = merge_ranks_.find(merge_key(left, right));
  return it == merge_ranks_.end() ? -1 : it->second;
}

int Vocab::byte_value(int32_t id) const {
  if (!valid(id) || types_[id] != TokenType::kByte) return -1;
  const int b = parse_byte_token(texts_[id]);
  if (b >= 0) return b;
  return texts_[id].size() == 1 ? static_cast<uint8_t>(texts_[id][0]) : -1;
}

}  // namespace sluice
