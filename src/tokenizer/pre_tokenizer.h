// PreTokenizer: splits text into words before byte-level BPE, with a sequence of
// regexes as llama.cpp and HF tokenizers apply them.
//
// Each step's regex (PCRE2, UTF + UCP so \p{L}, \p{N}, \p{P}, \s follow Unicode;
// `$` only at the very end) splits every word the previous steps produced: within
// a word, successive leftmost matches become words, and so do the stretches
// between them. The word is the regex's whole subject, so lookaheads and `$` stop
// at its end. A step may instead drop its matches (HF Split "Removed"); without
// such a step the words always concatenate back to the input. Bytes that are not
// valid UTF-8 are words of their own before any step runs.
//
// The steps of each tokenizer.ggml.pre name are in pre_tokenizer_table.h.
// split() is const and thread-safe (each call uses its own match data, allocated
// once per call, and writes only to the caller's vector).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct PreSplitStep {
  std::string regex;
  bool remove_matches = false;  // drop the matched text (HF Split behavior "Removed")
};

class PreTokenizer {
 public:
  // Compiles every step's regex; a bad one is kInvalidArgument with PCRE2's message.
  // No steps: the text is one word.
  static StatusOr<std::unique_ptr<PreTokenizer>> from_steps(std::vector<PreSplitStep> steps);
  // One isolating step.
  static StatusOr<std::unique_ptr<PreTokenizer>> from_pattern(const std::string& pattern);
  // The pre-tokenizer for a tokenizer.ggml.pre name ("" is "default"); unknown
  // names are kUnimplemented, listing the supported ones.
  static StatusOr<std::unique_ptr<PreTokenizer>> for_pre(std::string_view pre);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` (views into it, in order, never empty) to `words`.
  void split(std::string_view text, std::vector<std::string_view>* words) const;
  const std::vector<PreSplitStep>& steps() const { return steps_; }

 private:
  PreTokenizer() = default;
  void split_step(size_t step, std::string_view text, void* match_data,
                  std::vector<std::string_view>* words) const;

  std::vector<PreSplitStep> steps_;
  std::vector<void*> codes_;  // [steps_.size()] pcre2_code_8*, owned
};

}  // namespace sluice
