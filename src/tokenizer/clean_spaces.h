// SpaceCleaner: the clean_spaces detokenizer rule (HF clean_up_tokenization_spaces,
// as llama.cpp applies it to a whole detokenized text), computed as the text streams.
//
// Three rewrites, each over the result of the one before:
//   1. a space right before '?', '!', '.' or ',' is dropped        "a ." -> "a."
//   2. " ' " becomes "'", matches taken left to right, not overlapping
//                                                                    "a ' b" -> "a'b"
//   3. a space right before "'s", "'m", "'re" or "'ve" is dropped   "it 's" -> "it's"
//      (" 't", " 'd", " 'll" and " n't" are left alone, as llama.cpp leaves them;
//      HF's own clean-up also rewrites " n't")
// The rules look only at ASCII bytes, so UTF-8 text passes through unharmed and
// the cleaner may be fed any split of the bytes.
//
// Each rewrite holds at most 3 bytes that a later byte may still change (" ",
// " '", " 'r", " 'v"), so push() releases all but a short tail and finish()
// flushes it: for every split of a text into pushes, the released bytes equal
// clean_spaces() of the whole. No allocation besides appending to `out`. One
// cleaner per stream; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {

class SpaceCleaner {
 public:
  // Appends to *out the cleaned bytes of `text` that no later byte can change.
  void push(std::string_view text, std::string* out);
  // End of the text: appends the held tail to *out and resets.
  void finish(std::string* out);

 private:
  void punct_stage(char c, std::string* out);
  void quote_stage(char c, std::string* out);
  void contraction_stage(char c, std::string* out);
  void flush_quote(std::string* out);
  void flush_contraction(std::string* out);

  // What each stage holds: 0 nothing; 1 " "; 2 " '"; 3 " 'r"; 4 " 'v".
  bool punct_space_ = false;
  uint8_t quote_state_ = 0;
  uint8_t contraction_state_ = 0;
};

// The whole text cleaned at once.
std::string clean_spaces(std::string_view text);

}  // namespace sluice
