// SentencePiece-style encoding ("llama" vocab): scored bigram merges over characters.
//
// The text is cut into UTF-8 characters; then, repeatedly, the adjacent pair whose
// concatenation is a vocab token with the highest score is merged (ties go to the
// leftmost pair). Finally every piece that is not a token is split back along its
// merge history, and characters that are not tokens become byte tokens <0xHH>
// (or one unknown token per character when the vocab lacks those byte tokens).
//
//   text   "▁hello"      symbols  ▁ h e l l o
//   merge  "l"+"l"  ->   ▁ h e ll o      (highest-scoring token among the pairs)
//   ...    until no adjacent pair forms a token
//
// Stateless free function; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

// Appends the ids of `text` to `out`. `text` must already be in SentencePiece form
// (spaces replaced by U+2581, the space prefix added if the model wants one).
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out);

// Spaces -> U+2581 ("▁"), as SentencePiece escapes whitespace.
std::string spm_escape_spaces(std::string_view text);

}  // namespace sluice
