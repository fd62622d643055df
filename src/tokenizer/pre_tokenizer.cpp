#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "tokenizer/pre_tokenizer_table.h"
#include "tokenizer/unicode.h"

namespace sluice {

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::from_steps(std::vector<PreSplitStep> steps) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  for (const PreSplitStep& step : steps) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(step.regex.data()), step.regex.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return invalid_argument("pre-tokenizer regex '{}' does not compile at offset {}: {}", step.regex,
                              error_offset, reinterpret_cast<const char*>(message));
    }
    pt->codes_.push_back(code);
  }
  pt->steps_ = std::move(steps);
  return pt;
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::from_pattern(const std::string& pattern) {
  return from_steps({PreSplitStep{pattern, false}});
}

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::for_pre(std::string_view pre) {
  const PreName* name = find_pre_name(pre);
  if (!name) {
    return unimplemented("tokenizer.ggml.pre '{}' is not supported (supported: {})", pre,
                         supported_pre_names());
  }
  const PreType& type = pre_types()[name->type];
  std::vector<PreSplitStep> steps;
  for (int i = 0; i < type.n_regexes(); ++i) steps.push_back({std::string(type.regexes[i]), false});
  return from_steps(std::move(steps));
}

PreTokenizer::~PreTokenizer() {
  for (void* code : codes_) pcre2_code_free(static_cast<pcre2_code*>(code));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  // One match data serves every step: each match's bounds are read before recursing.
  uint32_t ovector_pairs = 1;
  for (void* code : codes_) {
    uint32_t captures = 0;
    pcre2_pattern_info(static_cast<pcre2_code*>(code), PCRE2_INFO_CAPTURECOUNT, &captures);
    ovector_pairs = std::max(ovector_pairs, captures + 1);
  }
  pcre2_match_data* md = pcre2_match_data_create(ovector_pairs, nullptr);
  // The steps run over each maximal valid UTF-8 stretch; invalid bytes stand alone.
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const size_t n = utf8_valid_char_len(text.substr(i));
    if (n > 0) {
      i += n;
      continue;
    }
    split_step(0, text.substr(start, i - start), md, words);
    words->push_back(text.substr(i, 1));
    start = ++i;
  }
  split_step(0, text.substr(start), md, words);
  pcre2_match_data_free(md);
}

void PreTokenizer::split_step(size_t step, std::string_view text, void* match_data,
                              std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  if (step == codes_.size()) {
    words->push_back(text);
    return;
  }
  auto* code = static_cast<const pcre2_code*>(codes_[step]);
  auto* md = static_cast<pcre2_match_data*>(match_data);
  const bool remove = steps_[step].remove_matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t stretch = 0;  // start of the text not yet emitted
  size_t search = 0;   // where the next match may start
  while (search < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), search, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;  // no further match: the rest is one word
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match is no word: search again one character on
      search = begin + std::max<size_t>(1, utf8_valid_char_len(text.substr(begin)));
      continue;
    }
    split_step(step + 1, text.substr(stretch, begin - stretch), md, words);
    if (!remove) split_step(step + 1, text.substr(begin, end - begin), md, words);
    stretch = search = end;
  }
  split_step(step + 1, text.substr(stretch), md, words);
}

}  // namespace sluice
