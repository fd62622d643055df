#include "spec/draft_length.h"

#include <gtest/gtest.h>

#include <vector>

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
  // Probes after 8 idle rounds, then 16, 32, ... up to 128.
  std::vector<int> probes;
  for (int i = 1; i <= 300; ++i)
    if (poor.next(0.5) > 0) probes.push_back(i);
  EXPECT_EQ(probes, (std::vector<int>{8, 24, 56, 120, 248}));

  // Half accepted per token: the planner's best length for a = 0.5 is short.
  DraftLength mid({.max_k = 8});
  for (int i = 0; i < 200; ++i) mid.observe(2, i % 2 == 0 ? 2 : 0);  // 2 survivals, 1 failure per 2 rounds
  EXPECT_NEAR(mid.acceptance(), 2.0 / 3.0, 0.05);
  const int32_t k = mid.next(0.1);
  EXPECT_GE(k, 2);
  EXPECT_LE(k, 5);

  // A prior from what the proposer achieved on other sequences.
  EXPECT_NEAR(DraftLength({.prior_acceptance = 0.9}).acceptance(), 0.9, 1e-9);
  EXPECT_EQ(DraftLength({.max_k = 8, .prior_acceptance = 0.95}).next(0.05), 8);
  EXPECT_EQ(DraftLength({.max_k = 8, .prior_acceptance = 0.2}).next(0.5), 0);

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
