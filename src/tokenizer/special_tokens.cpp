#include "tokenizer/special_tokens.h"

#include "tokenizer/pre_tokenizer_table.h"

namespace sluice {

namespace {

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

std::vector<TextFragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                               bool parse_special) {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(TextFragment{-1, text});
  std::vector<TextFragment> next;
  // jina-v2-*: "<mask>" swallows the whitespace before it (an lstrip token).
  const PreName* pre = vocab.model() == VocabModel::kBpe ? find_pre_name(vocab.pre()) : nullptr;
  const bool mask_lstrip = pre && pre->mask_lstrip;
  for (const int32_t id : vocab.special_tokens()) {
    const TokenType type = vocab.type(id);
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string_view special = vocab.text(id);
    const bool lstrip = mask_lstrip && special == "<mask>";
    next.clear();
    bool found = false;
    for (const TextFragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t pos; (pos = rest.find(special)) != std::string_view::npos;) {
        found = true;
        std::string_view left = rest.substr(0, pos);
        while (lstrip && !left.empty() && is_ascii_space(left.back())) left.remove_suffix(1);
        if (!left.empty()) next.push_back(TextFragment{-1, left});
        next.push_back(TextFragment{id, {}});
        rest.remove_prefix(pos + special.size());
      }
      if (!rest.empty()) next.push_back(TextFragment{-1, rest});
    }
    if (found) fragments.swap(next);
  }
  return fragments;
}

}  // namespace sluice
