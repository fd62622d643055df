// StreamDecoder: incremental detokenization for streaming output.
//
// Feeds token ids one at a time and returns only complete UTF-8 characters. Bytes
// of a character split across tokens (byte-fallback <0xHH> tokens, GPT-2 byte
// pieces) are held until the character is complete. Bytes that can never form a
// valid character are replaced by U+FFFD as soon as that is known; finish() flushes
// a still-incomplete tail as one U+FFFD. Uses Tokenizer::piece_after, so the SPM
// leading-space rule matches decode(), and, when the tokenizer has clean_spaces,
// the same rewrites through a SpaceCleaner (which holds back a space, or " '",
// " 'r", " 'v", until the next bytes decide): for valid UTF-8 the concatenated
// output of push() and finish() equals decode() of the same ids.
// Holds a reference to the Tokenizer (which must outlive it). One StreamDecoder per
// stream; not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/clean_spaces.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false);

  // Adds one token; returns the text that became complete (possibly "").
  std::string push(int32_t id);
  // Ends the stream: returns held bytes (U+FFFD for an incomplete character) and
  // resets, so the decoder can start a new stream.
  std::string finish();

 private:
  // Moves the complete characters of pending_ to *out (U+FFFD for bytes that
  // cannot form one); keeps an incomplete tail.
  void drain(std::string* out);

  const Tokenizer& tok_;
  bool render_special_;
  bool clean_;           // tok_.clean_spaces()
  SpaceCleaner cleaner_;
  int32_t prev_id_ = -1;
  std::string pending_;  // bytes of a character not yet complete (at most 3)
};

}  // namespace sluice
