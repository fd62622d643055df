#include "tokenizer/ugm.h"

#include <algorithm>
#include <cfloat>
#include <cstring>

#include "tokenizer/unicode.h"

namespace sluice {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";        // U+2581
constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD
constexpr float kUnknownPenalty = 10.0f;

// Length of the UTF-8 sequence at text[i] judged by its structure alone (lead
// byte and continuation bytes present), or 0 if it is not one. Overlong forms
// and surrogates pass, as SentencePiece-compatible normalizers let them.
size_t utf8_structural_len(std::string_view text, size_t i) {
  const auto b = static_cast<uint8_t>(text[i]);
  size_t n = 0;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) n = 2;
  else if ((b & 0xF0) == 0xE0) n = 3;
  else if ((b & 0xF8) == 0xF0) n = 4;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<uint8_t>(text[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// A path score as stored: float, saturated (file scores may be huge, and a float
// conversion of a finite double beyond the float range is undefined).
float stored_score(double s) { return s > FLT_MAX ? FLT_MAX : s < -FLT_MAX ? -FLT_MAX : static_cast<float>(s); }

// Fields of one packed double-array node.
uint32_t xcda_base(uint32_t node) { return (node >> 10) << ((node & (1u << 9)) >> 6); }
uint32_t xcda_lcheck(uint32_t node) { return node & ((1u << 31) | 0xFFu); }
bool xcda_leaf(uint32_t node) { return (node >> 8) & 1u; }
uint32_t xcda_value(uint32_t node) { return node & ((1u << 31) - 1); }

}  // namespace

StatusOr<std::unique_ptr<UgmEncoder>> UgmEncoder::create(const Vocab& vocab) {
  std::unique_ptr<UgmEncoder> enc(new UgmEncoder(vocab));
  const std::vector<uint8_t>& blob = vocab.precompiled_charsmap();
  if (!blob.empty()) {
    if (blob.size() < 4) {
      return data_loss("tokenizer.ggml.precompiled_charsmap has {} bytes, too few for its size field", blob.size());
    }
    uint32_t n_bytes = 0;
    std::memcpy(&n_bytes, blob.data(), 4);  // little endian, as GGUF
    if (n_bytes % 4 != 0 || static_cast<uint64_t>(n_bytes) + 4 >= blob.size()) {
      return data_loss("tokenizer.ggml.precompiled_charsmap: double array of {} bytes does not fit its {} bytes "
                       "as a multiple of 4 followed by replacement strings",
                       n_bytes, blob.size());
    }
    enc->xcda_.resize(n_bytes / 4);
    if (n_bytes > 0) std::memcpy(enc->xcda_.data(), blob.data() + 4, n_bytes);
    enc->replacements_ = std::string_view(reinterpret_cast<const char*>(blob.data()) + 4 + n_bytes,
                                          blob.size() - 4 - n_bytes);
  }

  float min_score = FLT_MAX;
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) {
    const TokenType t = vocab.type(id);
    if (t == TokenType::kNormal) min_score = std::min(min_score, vocab.score(id));
    if (t == TokenType::kNormal || t == TokenType::kUserDefined || t == TokenType::kUnused) {
      enc->tokens_.insert(vocab.text(id), id);
    }
    if (t == TokenType::kUserDefined) enc->user_defined_.insert(vocab.text(id), id);
  }
  enc->unknown_score_ = min_score - kUnknownPenalty;
  return enc;
}

size_t UgmEncoder::charsmap_match(std::string_view text, size_t offset, std::string_view* replacement) const {
  if (xcda_.empty()) return 0;
  size_t best = 0;
  uint32_t value = 0;
  uint32_t node = xcda_base(xcda_[0]);
  for (size_t p = offset; p < text.size(); ++p) {
    const auto c = static_cast<uint8_t>(text[p]);
    if (c == 0) break;
    node ^= c;
    if (node >= xcda_.size() || xcda_lcheck(xcda_[node]) != c) break;
    const bool leaf = xcda_leaf(xcda_[node]);
    node ^= xcda_base(xcda_[node]);
    if (leaf) {
      if (node >= xcda_.size()) break;  // a malformed table: stop at the last good match
      best = p - offset + 1;
      value = xcda_value(xcda_[node]);
    }
  }
  if (best == 0 || value >= replacements_.size()) return 0;
  const std::string_view rest = replacements_.substr(value);
  *replacement = rest.substr(0, std::min(rest.find('\0'), rest.size()));
  return best;
}

std::string_view UgmEncoder::normalize_prefix(std::string_view text, size_t offset, size_t* consumed) const {
  // The longest walk into the user-defined trie (a whole token or a prefix of one).
  size_t user = 0;
  for (int32_t node = ByteTrie::root(); offset + user < text.size(); ++user) {
    node = user_defined_.child(node, static_cast<uint8_t>(text[offset + user]));
    if (node < 0) break;
  }
  if (user > 0) {
    *consumed = user;
    return text.substr(offset, user);
  }
  std::string_view replacement;
  if (const size_t n = charsmap_match(text, offset, &replacement); n > 0) {
    *consumed = n;
    return replacement;
  }
  if (const size_t n = utf8_structural_len(text, offset); n > 0) {
    *consumed = n;
    return text.substr(offset, n);
  }
  *consumed = 1;
  return kReplacementUtf8;
}

std::string UgmEncoder::normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size() * 3);
  const bool prepend_space = vocab_.add_space_prefix();
  const bool merge_spaces = vocab_.remove_extra_whitespaces();
  bool space_prepended = false;
  bool in_word = false;
  for (size_t offset = 0; offset < text.size();) {
    size_t consumed = 0;
    const std::string_view norm = normalize_prefix(text, offset, &consumed);
    for (const char c : norm) {
      if (c != ' ') {
        if (!in_word) {
          in_word = true;
          if ((prepend_space && !space_prepended) || merge_spaces) {
            out.append(kSpace);
            space_prepended = true;
          }
        }
        out.push_back(c);
      } else {
        in_word = false;
        if (!merge_spaces) out.append(kSpace);
      }
    }
    offset += consumed;
  }
  return out;
}

void UgmEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  const std::string norm = normalize(text);
  const size_t n = norm.size();
  if (n == 0) return;
  const int32_t unk = vocab_.unk_id();

  // best[i]: the highest-scoring segmentation of norm[0, i): its last token, where
  // that token starts, and the summed score (float, summed in double as
  // SentencePiece does, so ties resolve identically).
  struct Best {
    int32_t id;
    size_t from;
    float score;
  };
  std::vector<Best> best(n + 1, Best{unk, 0, -FLT_MAX});
  best[0] = Best{unk, 0, 0.0f};
  for (size_t i = 0; i < n;) {
    const size_t char_len = std::min(utf8_seq_len(static_cast<uint8_t>(norm[i])), n - i);
    const double base = best[i].score;
    bool single_char_token = false;
    int32_t node = ByteTrie::root();
    for (size_t end = i + 1; end <= n; ++end) {
      node = tokens_.child(node, static_cast<uint8_t>(norm[end - 1]));
      if (node < 0) break;
      const int32_t id = tokens_.value(node);
      if (id < 0) continue;
      if (end - i == char_len) single_char_token = true;
      const double score = base + (vocab_.type(id) == TokenType::kUserDefined ? 0.0 : vocab_.score(id));
      if (score > best[end].score) best[end] = Best{id, i, stored_score(score)};
    }
    if (!single_char_token) {
      const double score = base + unknown_score_;
      if (score > best[i + char_len].score) best[i + char_len] = Best{unk, i, stored_score(score)};
    }
    i += char_len;
  }

  const size_t start = out->size();
  bool prev_unknown = false;
  for (size_t pos = n;;) {
    const Best& b = best[pos];
    const bool unknown = b.id == unk;
    if (!(prev_unknown && unknown) && b.id >= 0) out->push_back(b.id);
    if (b.from == 0) break;
    prev_unknown = unknown;
    pos = b.from;
  }
  std::reverse(out->begin() + static_cast<std::ptrdiff_t>(start), out->end());
}

}  // namespace sluice
