#include "spec/draft_length.h"

#include <gtest/gtest.h>

namespace sluice::spec {
namespace {

TEST(DraftLength, LongerDraftsWhenAcceptedShorterOrNoneWhenRejected) {
  DraftLength good({.max_k = 8});
  for (int i = 0; i < 30; ++i) good.observe(4, 4);
  EXPECT_GT(good.acceptance(), 0.9);
  EXPECT_EQ(good.next(0.02), 8);

  DraftLength poor({.max_k = 8});
  for (int i = 0; i < 30; ++i) poor.observe(4, 0);
  EXPECT_LT(poor.acceptance(), 0.2);
  // A cheap proposer still tries one token; an expensive one stops, then probes.
  EXPECT_EQ(poor.next(0.05), 1);
  int n_drafting = 0;
  for (int i = 0; i < 16; ++i) n_drafting += poor.next(0.5) > 0 ? 1 : 0;
  EXPECT_EQ(n_drafting, 2);  // one probe every 8 rounds

  // Half accepted per token: the planner's best length for a = 0.5 is short.
  DraftLength mid({.max_k = 8});
  for (int i = 0; i < 200; ++i) mid.observe(2, i % 2 == 0 ? 2 : 0);  // 2 survivals, 1 failure per 2 rounds
  EXPECT_NEAR(mid.acceptance(), 2.0 / 3.0, 0.05);
  const int32_t k = mid.next(0.1);
  EXPECT_GE(k, 2);
  EXPECT_LE(k, 5);

  DraftLength fixed({.max_k = 5, .adaptive = false});
  for (int i = 0; i < 30; ++i) fixed.observe(5, 0);
  EXPECT_EQ(fixed.next(10.0), 5);
}

TEST(StepCost, RecoversInterceptAndSlope) {
  StepCost c;
  EXPECT_EQ(c.per_token(), 0.0);
  for (int i = 0; i < 10; ++i) c.observe(4, 0.010);
  EXPECT_EQ(c.per_token(), 0.0);  // no spread in sizes yet
  EXPECT_NEAR(c.seconds(4), 0.010, 1e-9);
  for (int i = 0; i < 200; ++i) {
    const double n = 1 + i % 9;
    c.observe(n, 0.010 + 0.002 * n);
  }
  EXPECT_NEAR(c.per_token(), 0.002, 2e-4);
  EXPECT_NEAR(c.seconds(5), 0.020, 2e-3);
}

}  // namespace
}  // namespace sluice::spec
