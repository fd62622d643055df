// Unigram encoding ("t5" vocab: T5, mT5, other SentencePiece unigram models).
//
// 1. Normalize, left to right, the longest prefix each time:
//    - a prefix of a user-defined token (walking their trie) stays as it is;
//    - else the longest prefix that the precompiled charsmap maps is replaced
//      (SentencePiece's NFKC table: "ﬁ" -> "fi", full-width -> ASCII, ...);
//    - else one character is copied (an invalid byte becomes U+FFFD).
//    Spaces become U+2581; with add_space_prefix one is put before the first
//    non-space; with remove_extra_whitespaces whitespace runs collapse to one
//    U+2581 before each word and the ends are trimmed.
// 2. Segment: among all ways to cover the normalized text with vocab tokens
//    (normal, user-defined, unused), take the one whose summed score is highest
//    (Viterbi over byte offsets; user-defined tokens score 0). A character that no
//    single token covers may be covered by the unknown token at (lowest normal
//    score - 10); adjacent unknowns merge into one.
//
//   best[0] = 0;  for each char start i, each token t matching at i:
//       best[i + len(t)] = max(best[i + len(t)], best[i] + score(t))
//   backtrack from best[n].
//
// The charsmap blob is | u32 n | n bytes of XOR-compressed double array (one u32
// per node) | NUL-terminated replacement strings |, little endian.
// Immutable after create(); encode() is const and thread-safe. Holds a reference to
// the Vocab, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"
#include "tokenizer/byte_trie.h"
#include "tokenizer/vocab.h"

namespace sluice {

class UgmEncoder {
 public:
  // Checks the vocab's precompiled charsmap (kDataLoss naming what is wrong) and
  // builds the token tries.
  static StatusOr<std::unique_ptr<UgmEncoder>> create(const Vocab& vocab);

  // Appends the ids of `text` (no BOS/EOS; the Tokenizer adds those).
  void encode(std::string_view text, std::vector<int32_t>* out) const;

  // Step 1 alone: the text as the segmentation sees it.
  std::string normalize(std::string_view text) const;

 private:
  explicit UgmEncoder(const Vocab& vocab) : vocab_(vocab) {}
  // The normalized form of the longest prefix of text[offset..] that maps as one
  // unit (a view into the text or the charsmap), and how many bytes it consumed.
  std::string_view normalize_prefix(std::string_view text, size_t offset, size_t* consumed) const;
  // Bytes of the longest charsmap key starting at text[offset] (0 if none); sets
  // *replacement to its replacement string.
  size_t charsmap_match(std::string_view text, size_t offset, std::string_view* replacement) const;

  const Vocab& vocab_;
  ByteTrie tokens_;        // normal, user-defined and unused tokens -> id
  ByteTrie user_defined_;  // user-defined tokens
  std::vector<uint32_t> xcda_;       // [n nodes] charsmap double array
  std::string_view replacements_;    // into vocab_.precompiled_charsmap()
  float unknown_score_ = 0.0f;
};

}  // namespace sluice
