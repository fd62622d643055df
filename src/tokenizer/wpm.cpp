#include "tokenizer/wpm.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_class.h"

namespace sluice {

namespace {

constexpr std::string_view kWordPrefix = "\xE2\x96\x81";  // U+2581
constexpr uint32_t kReplacementCodepoint = 0xFFFD;

// CJK ideograph blocks that BERT isolates (as HF's BasicTokenizer lists them,
// including its 0x2B920 start of Extension E).
bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

std::vector<std::string> wpm_words(std::string_view text) {
  std::vector<std::string> words(1);
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = kReplacementCodepoint;
    const size_t len = utf8_valid_char_len(text.substr(i));
    if (len > 0) {
      cp = utf8_decode(text.substr(i), len);
      i += len;
    } else {
      ++i;  // an invalid byte reads as U+FFFD, which is dropped below
    }
    cp = unicode_nfd_base(cp);
    if (unicode_is_whitespace(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const UnicodeClass cls = unicode_class(cp);
    if (cp == 0 || cp == kReplacementCodepoint || cls == UnicodeClass::kControl) continue;
    const bool alone = cls == UnicodeClass::kPunctuation || (cp < 0x7F && cls == UnicodeClass::kSymbol) ||
                       is_cjk_ideograph(cp);
    if (alone && !words.back().empty()) words.emplace_back();
    utf8_append(unicode_to_lower(cp), &words.back());
    if (alone) words.emplace_back();
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

WpmEncoder::WpmEncoder(const Vocab& vocab) : vocab_(vocab) {
  for (int32_t id = 0; id < vocab.n_vocab(); ++id) max_token_len_ = std::max(max_token_len_, vocab.text(id).size());
}

void WpmEncoder::encode(std::string_view text, std::vector<int32_t>* out) const {
  std::string word;
  for (const std::string& w : wpm_words(text)) {
    word.assign(kWordPrefix);
    word.append(w);
    const std::string_view s(word);
    const size_t start = out->size();
    bool covered = true;
    for (size_t i = 0; i < s.size() && covered;) {
      covered = false;
      // Longest token first; lengths are in bytes, as the vocab stores them.
      for (size_t j = std::min(s.size(), i + max_token_len_); j > i; --j) {
        const int32_t id = vocab_.find(s.substr(i, j - i));
        if (id >= 0) {
          out->push_back(id);
          i = j;
          covered = true;
          break;
        }
      }
    }
    if (!covered) {
      out->resize(start);
      if (vocab_.unk_id() >= 0) out->push_back(vocab_.unk_id());
    }
  }
}

}  // namespace sluice
