// OutputText: the text of one output as it streams, with stop strings.
//
// Tokens become text through a StreamDecoder (whole UTF-8 characters only).
// Text that could still turn into a stop string is held back: at most
// (longest stop string - 1) bytes. When a stop string appears, the text is cut
// just before it and nothing more is released.
//
//   text_:   "... emitted ... | held back (may start a stop) |"
//                              ^ emitted_
// Owned by the engine thread; not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

class OutputText {
 public:
  OutputText() = default;
  OutputText(const Tokenizer& tok, std::vector<std::string> stop_strings);

  // Adds a token's text and appends what may now be released to *out.
  // Returns true when a stop string matched (now or before).
  bool push(int32_t token, std::string* out);
  // Flushes the decoder; returns the held-back text (none after a stop string).
  std::string finish(bool release);
  // Everything accepted so far (cut at a stop string).
  const std::string& text() const { return text_; }

 private:
  std::unique_ptr<StreamDecoder> dec_;
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace sluice
