// RWKV World encoding ("rwkv" vocab).
//
// Tokens are arbitrary byte strings, stored in GGUF escaped as text: "\t", "\n",
// "\r", "\xHH" (two hex digits) and "\" before any other character stand for that
// byte; everything else is itself. The text is covered left to right by the
// longest token that matches its bytes at each position (a byte trie walk); a
// byte no token starts with becomes the unknown token if the vocab has one, else
// nothing (World vocabularies hold all 256 single bytes, so this does not happen).
//
//   vocab  "a" "ab" "abc" "b"      text "abab"  ->  "ab" "ab"
//
// Immutable after construction; encode() is const and thread-safe. Holds a
// reference to the Vocab, which must outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/byte_trie.h"
#include "tokenizer/vocab.h"

namespace sluice {

// The bytes an escaped RWKV token text stands for. A malformed escape (a trailing
// "\" or "\x" without two hex digits) keeps what was read of it.
std::string rwkv_unescape(std::string_view escaped);

class RwkvEncoder {
 public:
  explicit RwkvEncoder(const Vocab& vocab);

  // Appends the ids of `text`.
  void encode(std::string_view text, std::vector<int32_t>* out) const;

 private:
  const Vocab& vocab_;
  ByteTrie tokens_;  // unescaped token bytes -> id
};

}  // namespace sluice
