// The summary of several predicted/measured rounds: medians for odd and even
// counts, the median of the per-round ratios (not the ratio of the medians),
// and the count of rounds within the tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "plan/measure_rounds.h"

namespace sluice::plan {
namespace {

TEST(MeasureRounds, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({3}), 3);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({10, 2}), 6);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(MeasureRounds, OddCountTakesTheMiddleRound) {
  const std::vector<RoundFigures> r = {{.predicted = 100, .measured = 90},
                                       {.predicted = 50, .measured = 60},
                                       {.predicted = 80, .measured = 80}};
  const RoundsSummary s = summarize_rounds(r, 0.15);
  EXPECT_EQ(s.n_rounds, 3);
  EXPECT_DOUBLE_EQ(s.predicted, 80);
  EXPECT_DOUBLE_EQ(s.measured, 80);
  EXPECT_DOUBLE_EQ(s.ratio, 1.0);  // ratios 0.9, 1.2, 1.0
  EXPECT_EQ(s.n_within, 2);        // 1.2 is outside 15%
}

TEST(MeasureRounds, EvenCountAveragesTheMiddleTwo) {
  const std::vector<RoundFigures> r = {{.predicted = 100, .measured = 80},
                                       {.predicted = 100, .measured = 110},
                                       {.predicted = 200, .measured = 180},
                                       {.predicted = 40, .measured = 60}};
  const RoundsSummary s = summarize_rounds(r, 0.15);
  EXPECT_EQ(s.n_rounds, 4);
  EXPECT_DOUBLE_EQ(s.predicted, 100);          // 40 100 100 200
  EXPECT_DOUBLE_EQ(s.measured, 0.5 * (80 + 110));  // 60 80 110 180
  EXPECT_DOUBLE_EQ(s.ratio, 0.5 * (0.9 + 1.1));    // 0.8 0.9 1.1 1.5
  EXPECT_EQ(s.n_within, 2);
}

// The ratio summarizes each round against its own prediction: a slow round
// predicted slow and a fast round predicted fast are both exact, even though
// the median measured over the median predicted is not 1.
TEST(MeasureRounds, RatioIsTheMedianOfPerRoundRatios) {
  const std::vector<RoundFigures> r = {{.predicted = 10, .measured = 10}, {.predicted = 30, .measured = 30}};
  const RoundsSummary s = summarize_rounds(r, 0.15);
  EXPECT_DOUBLE_EQ(s.ratio, 1.0);
  EXPECT_EQ(s.n_within, 2);
  const std::vector<RoundFigures> crossed = {{.predicted = 10, .measured = 30}, {.predicted = 30, .measured = 10}};
  const RoundsSummary c = summarize_rounds(crossed, 0.15);
  EXPECT_DOUBLE_EQ(c.measured / c.predicted, 1.0);
  EXPECT_DOUBLE_EQ(c.ratio, 0.5 * (3.0 + 1.0 / 3.0));
  EXPECT_EQ(c.n_within, 0);
}

TEST(MeasureRounds, WithinToleranceCountsBothSides) {
  const std::vector<RoundFigures> r = {{.predicted = 100, .measured = 84},  {.predicted = 100, .measured = 86},
                                       {.predicted = 100, .measured = 100}, {.predicted = 100, .measured = 114},
                                       {.predicted = 100, .measured = 116}};
  EXPECT_EQ(summarize_rounds(r, 0.15).n_within, 3);
  EXPECT_EQ(summarize_rounds(r, 0.20).n_within, 5);
  EXPECT_EQ(summarize_rounds(r, 0.0).n_within, 1);
}

}  // namespace
}  // namespace sluice::plan
