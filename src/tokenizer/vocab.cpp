#include "tokenizer/vocab.h"

#include <algorithm>

#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/unicode.h"

namespace sluice {

namespace {

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";

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

StatusOr<Vocab> Vocab::load(const Metadata& md) {
  Vocab v;
  const std::optional<std::string> model = md.get_string(kModelKey);
  if (!model) return not_found("{} is missing (no tokenizer in this model)", kModelKey);
  if (*model == "llama") {
    v.model_ = VocabModel::kSpm;
  } else if (*model == "gpt2") {
    v.model_ = VocabModel::kBpe;
  } else {
    return unimplemented("tokenizer model '{}' is not supported (supported: llama, gpt2)", *model);
  }
  v.pre_ = md.get_string("tokenizer.ggml.pre").value_or("");
  RETURN_IF_ERROR(v.load_arrays(md));
  if (v.model_ == VocabModel::kBpe) RETURN_IF_ERROR(v.load_merges(md));
  v.load_specials(md);
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

  scores_.assign(n, 0.0f);
  if (const MetaArray* scores = md.get_array(kScoresKey)) {
    if (scores->size() != n) {
      return data_loss("{} has {} entries, expected {}", kScoresKey, scores->size(), n);
    }
    if (!scores->floats.empty()) {
      for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(scores->floats[i]);
    } else if (!scores->ints.empty()) {
      for (size_t i = 0; i < n; ++i) scores_[i] = static_cast<float>(scores->ints[i]);
    } else {
      return data_loss("{} is not an array of numbers", kScoresKey);
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
  } else if (model_ == VocabModel::kSpm) {
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

void Vocab::load_specials(const Metadata& md) {
  const bool spm = model_ == VocabModel::kSpm;
  const auto id_or = [&](const char* key, int32_t fallback) -> int32_t {
    const std::optional<int64_t> v = md.get_int(key);
    if (!v) return valid(fallback) ? fallback : -1;
    // Out-of-range ids (GGUF writers use 0xFFFFFFFF for "none") mean none.
    return *v >= 0 && *v < n_vocab() ? static_cast<int32_t>(*v) : -1;
  };
  bos_id_ = id_or("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  eos_id_ = id_or("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  unk_id_ = id_or("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  pad_id_ = id_or("tokenizer.ggml.padding_token_id", -1);
  eot_id_ = id_or("tokenizer.ggml.eot_token_id", -1);
  eom_id_ = id_or("tokenizer.ggml.eom_token_id", -1);

  // The pre-tokenizer name sets BPE defaults (unknown names are refused by the
  // Tokenizer); an importer may state ignore_merges explicitly.
  const PreName* pre = spm ? nullptr : find_pre_name(pre_);
  ignore_merges_ = md.get_bool(kIgnoreMergesKey).value_or(pre && pre->ignore_merges);
  if (spm) ignore_merges_ = false;
  clean_spaces_ = !spm && (pre == nullptr || pre->clean_spaces);
  add_bos_ = md.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || (pre && pre->add_bos));
  add_eos_ = md.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  add_space_prefix_ = md.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
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
}

void Vocab::build_byte_tokens() {
  for (int b = 0; b < 256; ++b) {
    int32_t id = -1;
    if (model_ == VocabModel::kSpm) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', '\0'};
      id = find(name);
      if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    } else {
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
