#include "tokenizer/special_tokens.h"

namespace sluice {

std::vector<TextFragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                               bool parse_special) {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(TextFragment{-1, text});
  std::vector<TextFragment> next;
  for (const int32_t id : vocab.special_tokens()) {
    const TokenType type = vocab.type(id);
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string_view special = vocab.text(id);
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
        if (pos > 0) next.push_back(TextFragment{-1, rest.substr(0, pos)});
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
