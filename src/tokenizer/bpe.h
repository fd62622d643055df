// Byte-level BPE encoding ("gpt2" vocab) of one pre-tokenized word.
//
// The word's bytes are spelled in the GPT-2 byte-level alphabet (one printable code
// point per byte), cut into characters, and adjacent pairs are merged in order of
// their merge rank (lowest rank first; equal ranks: leftmost first) until no pair has
// a merge. Each resulting piece is a token; a piece that is not (a vocab without all
// 256 byte characters) falls back to its characters' tokens, or unk.
//
// Stateless free function; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

// Appends the ids of one pre-tokenized `word` (raw bytes) to `out`.
void bpe_encode_word(const Vocab& vocab, std::string_view word, std::vector<int32_t>* out);

}  // namespace sluice
