#include "spec/prompt_lookup.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"

namespace sluice::spec {

Status validate_prompt_lookup_config(const PromptLookupConfig& c) {
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min) {
    return invalid_argument("prompt lookup n-gram sizes must satisfy 1 <= min <= max, got {}..{}", c.ngram_min,
                            c.ngram_max);
  }
  return Status::ok_status();
}

void prompt_lookup(std::span<const int32_t> tokens, int32_t max_draft, const PromptLookupConfig& config,
                   std::vector<int32_t>* draft) {
  draft->clear();
  const int64_t len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(config.ngram_max, len - 1); n >= config.ngram_min; --n) {
    const std::span<const int32_t> suffix = tokens.last(static_cast<size_t>(n));
    // Most recent earlier occurrence: match start j < len - n, latest first.
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n;
      const int64_t take = std::min<int64_t>(max_draft, len - from);
      draft->assign(tokens.begin() + from, tokens.begin() + from + take);
      return;
    }
  }
}

PromptLookup::PromptLookup(const PromptLookupConfig& config) : config_(config) {
  CHECK(validate_prompt_lookup_config(config).ok());
}

std::string PromptLookup::describe() const {
  return fmt::format("prompt lookup (n-gram {}..{})", config_.ngram_min, config_.ngram_max);
}

Status PromptLookup::propose(std::span<DraftTask> tasks) {
  for (DraftTask& t : tasks) prompt_lookup(t.tokens, t.max_draft, config_, t.draft);
  return Status::ok_status();
}

}  // namespace sluice::spec
