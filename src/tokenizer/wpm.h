// WordPiece encoding ("bert" vocab, BERT-family embedding models).
//
// The text is normalized and cut into words first (wpm_words):
//   - every code point is replaced by the first code point of its canonical
//     decomposition (accents dropped: "é" -> "e") and lowercased;
//   - whitespace ends a word; NUL, U+FFFD, invalid bytes and control/format/
//     private-use characters are dropped;
//   - punctuation, ASCII symbols and CJK ideographs are words of their own.
// Then each word, with U+2581 in front, is covered greedily left to right by the
// longest vocab token at each position. GGUF stores BERT's word-initial pieces as
// "▁piece" and its "##piece" continuations as plain "piece", so this is BERT's
// WordPiece. A word that cannot be covered completely becomes one unknown token.
//
//   "Hello, wörld!"  ->  words  hello , world !
//   "▁hello" -> ▁hello     "▁world" -> ▁wor + ld     (longest match first)
//
// Immutable after construction; encode() is const and thread-safe. Holds a
// reference to the Vocab, which must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

// The words BERT's normalizer and pre-tokenizer make of `text`, in order, never empty.
std::vector<std::string> wpm_words(std::string_view text);

class WpmEncoder {
 public:
  explicit WpmEncoder(const Vocab& vocab);

  // Appends the ids of `text` (no [CLS]/[SEP]; the Tokenizer adds those).
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  const Vocab& vocab_;
  size_t max_token_len_ = 0;  // bytes of the longest token text
};

}  // namespace sluice
