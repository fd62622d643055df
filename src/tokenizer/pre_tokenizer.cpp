#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace sluice {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* pre_tokenizer_pattern(std::string_view pre) {
  if (pre.empty() || pre == "default" || pre == "gpt-2") return kGpt2Pattern;
  if (pre == "llama-bpe" || pre == "llama3") return kLlama3Pattern;
  if (pre == "qwen2") return kQwen2Pattern;
  return nullptr;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::from_pattern(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern,
                            error_offset, reinterpret_cast<const char*>(message));
  }
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  pt->pattern_ = pattern;
  pt->code_ = code;
  return pt;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::for_pre(std::string_view pre) {
  const char* pattern = pre_tokenizer_pattern(pre);
  if (!pattern) {
    return unimplemented("tokenizer.ggml.pre '{}' is not supported (supported: gpt-2, default, "
                         "llama-bpe, llama3, qwen2)", pre);
  }
  return from_pattern(pattern);
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(code_), nullptr);
  // Run the regex over each maximal valid UTF-8 stretch; invalid bytes stand alone.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const size_t n = utf8_valid_char_len(text.substr(i));
    if (n > 0) {
      i += n;
      continue;
    }
    split_valid(text.substr(start, i - start), md, words);
    words->push_back(text.substr(i, 1));
    start = ++i;
  }
  split_valid(text.substr(start), md, words);
  pcre2_match_data_free(md);
}

void PreTokenizer::split_valid(std::string_view text, void* match_data,
                               std::vector<std::string_view>* words) const {
  auto* code = static_cast<const pcre2_code*>(code_);
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) {  // no further match: the rest is one word
      words->push_back(text.substr(offset));
      return;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (begin > offset) words->push_back(text.substr(offset, begin - offset));
    if (end == begin) {  // empty match: take one character so the scan advances
      if (begin >= text.size()) return;
      end = begin + std::max<size_t>(1, utf8_valid_char_len(text.substr(begin)));
    }
    words->push_back(text.substr(begin, end - begin));
    offset = end;
  }
}

}  // namespace sluice
