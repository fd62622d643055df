// Splitting text around special tokens before it is tokenized.
//
// Special token texts found in the input become single ids and are never merged
// with the surrounding text. User-defined tokens are always split out (as HF
// tokenizers do with added tokens); control and unknown tokens ("<s>",
// "<|im_start|>") only when parse_special is set. Longer tokens are split out
// first, each at every occurrence, leftmost first. With the jina-v2-* pre-tokenizers,
// "<mask>" also takes the ASCII whitespace before it (as llama.cpp's lstrip
// attribute does). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

struct TextFragment {
  int32_t id = -1;        // the special token, or -1 for plain text
  std::string_view text;  // plain text (a view into the input); empty for a token
};

// The input as an ordered list of plain-text pieces and special tokens.
std::vector<TextFragment> split_special_tokens(const Vocab& vocab, std::string_view text,
                                               bool parse_special);

}  // namespace sluice
