// PreTokenizer: splits text into words with a byte-level BPE model's regex.
//
// The pattern is compiled once (PCRE2, UTF + UCP so \p{L}, \p{N} and \s follow
// Unicode) when the PreTokenizer is created; split() scans the text left to right,
// taking successive matches as words. Text between matches (none for the known
// patterns) and bytes that are not valid UTF-8 become words of their own, so the
// words always concatenate back to the input. split() is const and thread-safe
// (each call uses its own match data, allocated once per call).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice {

// The split regexes of the supported tokenizer.ggml.pre values.
// GPT-2: contractions, optional space + letters / digits / other, whitespace.
extern const char* const kGpt2Pattern;
// Llama 3: case-insensitive contractions, digit groups of 1-3, newlines kept together.
extern const char* const kLlama3Pattern;
// Qwen2: as Llama 3, but every digit is its own word.
extern const char* const kQwen2Pattern;

// Pattern for a tokenizer.ggml.pre name ("", "default", "gpt-2", "llama-bpe",
// "llama3", "qwen2"), or nullptr if the name is not supported.
const char* pre_tokenizer_pattern(std::string_view pre);

class PreTokenizer {
 public:
  // Compiles `pattern`; a bad pattern is kInvalidArgument with PCRE2's message.
  static StatusOr<std::unique_ptr<PreTokenizer>> from_pattern(const std::string& pattern);
  // The pre-tokenizer for a tokenizer.ggml.pre name; unknown names are kUnimplemented.
  static StatusOr<std::unique_ptr<PreTokenizer>> for_pre(std::string_view pre);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` (views into it, in order, never empty) to `words`.
  void split(std::string_view text, std::vector<std::string_view>* words) const;
  const std::string& pattern() const { return pattern_; }

 private:
  PreTokenizer() = default;
  void split_valid(std::string_view text, void* match_data, std::vector<std::string_view>* words) const;

  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, owned
};

}  // namespace sluice
