// PromptLookup: drafts by n-gram matching in the sequence's own tokens.
//
// The last n committed tokens (n from ngram_max down to ngram_min) are looked up
// earlier in the same sequence (prompt and generated text); the tokens that
// followed the most recent earlier match are the draft:
//
//   tokens   ... a b c x y z ... a b c |        (last 3 tokens: "a b c")
//   match         ^^^^^                          most recent earlier "a b c"
//   draft               x y z ...                up to max_draft tokens
//
// No model and no state: drafts are deterministic. Pays off on repetitive text
// (code edits, quoting the prompt, extraction). Cost: O(length x ngram_max) per
// sequence per step, no allocation beyond the draft.
#pragma once

#include "spec/proposer.h"

namespace sluice::spec {

struct PromptLookupConfig {
  int32_t ngram_min = 1;
  int32_t ngram_max = 3;
};

// Errors: ngram_min < 1 or ngram_max < ngram_min.
Status validate_prompt_lookup_config(const PromptLookupConfig& config);

// The draft for one sequence: tokens after the most recent earlier occurrence of
// its longest matching suffix (ngram_max .. ngram_min), at most max_draft.
void prompt_lookup(std::span<const int32_t> tokens, int32_t max_draft, const PromptLookupConfig& config,
                   std::vector<int32_t>* draft);

class PromptLookup : public Proposer {
 public:
  // config must pass validate_prompt_lookup_config (CHECKed).
  explicit PromptLookup(const PromptLookupConfig& config);
  std::string describe() const override;
  bool draws_from_sampler() const override { return false; }
  Status propose(std::span<DraftTask> tasks) override;

 private:
  PromptLookupConfig config_;
};

}  // namespace sluice::spec
