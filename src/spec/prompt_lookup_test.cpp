#include "spec/prompt_lookup.h"

#include <gtest/gtest.h>

namespace sluice::spec {
namespace {

std::vector<int32_t> lookup(const std::vector<int32_t>& tokens, int32_t k, PromptLookupConfig c = {}) {
  std::vector<int32_t> d = {99};  // must be cleared
  prompt_lookup(tokens, k, c, &d);
  return d;
}

TEST(PromptLookup, FollowsTheMostRecentLongestMatch) {
  //                       0  1  2  3  4  5  6  7  8  9 10 11
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3};
  // Suffix "1 2 3" occurs at 0: the draft is what followed it.
  EXPECT_EQ(lookup(t, 4), (std::vector<int32_t>{4, 5, 9, 2}));
  // Only bigrams: "2 3" last occurred at 6 -> 7 8 1.
  EXPECT_EQ(lookup(t, 3, {.ngram_min = 1, .ngram_max = 2}), (std::vector<int32_t>{7, 8, 1}));
  // The draft stops at the end of the sequence.
  EXPECT_EQ(lookup(t, 20, {.ngram_min = 1, .ngram_max = 2}), (std::vector<int32_t>{7, 8, 1, 2, 3}));
}

TEST(PromptLookup, FallsBackToShorterNgramsAndMayFindNothing) {
  EXPECT_EQ(lookup({5, 6, 7, 8, 6}, 2), (std::vector<int32_t>{7, 8}));  // only the unigram "6" matches
  EXPECT_TRUE(lookup({1, 2, 3, 4}, 3).empty());
  EXPECT_TRUE(lookup({1}, 3).empty());
  EXPECT_TRUE(lookup({}, 3).empty());
  EXPECT_TRUE(lookup({5, 6, 7, 8, 6}, 2, {.ngram_min = 2, .ngram_max = 3}).empty());
  // A run of one token repeats itself.
  EXPECT_EQ(lookup({4, 4, 4, 4}, 3), (std::vector<int32_t>{4}));
}

TEST(PromptLookup, ProposerFillsEveryTask) {
  PromptLookup p({.ngram_min = 1, .ngram_max = 2});
  EXPECT_FALSE(p.draws_from_sampler());
  EXPECT_NE(p.describe().find("1..2"), std::string::npos);
  const std::vector<int32_t> a = {1, 2, 1}, b = {3, 4};
  std::vector<int32_t> da, db = {7};
  std::vector<DraftTask> tasks = {{.seq = 1, .tokens = a, .max_draft = 2, .draft = &da},
                                  {.seq = 2, .tokens = b, .max_draft = 2, .draft = &db}};
  ASSERT_TRUE(p.propose(tasks).ok());
  EXPECT_EQ(da, (std::vector<int32_t>{2, 1}));
  EXPECT_TRUE(db.empty());
  EXPECT_FALSE(validate_prompt_lookup_config({.ngram_min = 0}).ok());
  EXPECT_FALSE(validate_prompt_lookup_config({.ngram_min = 3, .ngram_max = 2}).ok());
}

}  // namespace
}  // namespace sluice::spec
