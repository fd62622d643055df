#include "plan/rate_curve.h"

#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

TEST(RateCurve, EmptyReadsZeroAndFallsBack) {
  const RateCurve c;
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.at(16), 0.0);
  EXPECT_EQ(c.at_or(16, 0.7), 0.7);
}

TEST(RateCurve, SortsDropsFailedProbesAndKeepsTheLaterOfTwoEqualSizes) {
  const RateCurve c({{64, 0.55}, {16, 0.45}, {0, 1.0}, {32, 0.0}, {16, 0.4}, {8, -1.0}});
  ASSERT_EQ(c.points().size(), 2u);
  EXPECT_EQ(c.points()[0].n_tokens, 16);
  EXPECT_DOUBLE_EQ(c.points()[0].rate, 0.4);
  EXPECT_EQ(c.points()[1].n_tokens, 64);
  EXPECT_DOUBLE_EQ(c.at_or(16, 9.0), 0.4);
}

TEST(RateCurve, LinearInLog2BetweenPointsFlatOutside) {
  const RateCurve c({{8, 0.3}, {16, 0.45}, {64, 0.55}});
  EXPECT_DOUBLE_EQ(c.at(8), 0.3);
  EXPECT_DOUBLE_EQ(c.at(16), 0.45);
  EXPECT_DOUBLE_EQ(c.at(64), 0.55);
  EXPECT_NEAR(c.at(32), 0.50, 1e-12);    // halfway from 16 to 64 in log2
  EXPECT_NEAR(c.at(11.3137), 0.3 + 0.15 * 0.5, 1e-4);  // 8 x sqrt(2)
  EXPECT_DOUBLE_EQ(c.at(1), 0.3);
  EXPECT_DOUBLE_EQ(c.at(0), 0.3);
  EXPECT_DOUBLE_EQ(c.at(128), 0.55);
  EXPECT_DOUBLE_EQ(c.at(1e6), 0.55);
}

TEST(RateCurve, OnePointIsFlat) {
  const RateCurve c({{64, 0.6}});
  EXPECT_DOUBLE_EQ(c.at(256), 0.6);
  EXPECT_DOUBLE_EQ(c.at(2), 0.6);
}

}  // namespace
}  // namespace sluice::plan
