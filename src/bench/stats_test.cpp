#include "bench/stats.h"

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(BenchStats, SpreadOfOddAndEvenCounts) {
  const Spread odd = spread_of({5, 1, 3});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_EQ(odd.mean, 3);
  EXPECT_DOUBLE_EQ(odd.stddev, 2.0);  // sample: sqrt((4 + 0 + 4) / 2)
  EXPECT_EQ(odd.all, (std::vector<double>{5, 1, 3})) << "the runs keep their order";

  const Spread even = spread_of({4, 1, 3, 2});
  EXPECT_EQ(even.median, 2.5);
  EXPECT_EQ(even.mean, 2.5);
  EXPECT_EQ(spread_of({7}).stddev, 0);
  EXPECT_EQ(spread_of({}).median, 0);
}

TEST(BenchStats, MedianIsTheMiddleOrTheMeanOfTheTwoMiddle) {
  EXPECT_EQ(median({9, 2, 4}), 4);
  EXPECT_EQ(median({9, 2, 4, 6}), 5);
  EXPECT_EQ(median({}), 0);
}

TEST(BenchStats, PercentileIsLinearBetweenOrderStatistics) {
  const std::vector<double> v = {40, 10, 30, 20};
  EXPECT_EQ(percentile(v, 0), 10);
  EXPECT_EQ(percentile(v, 1), 40);
  EXPECT_EQ(percentile(v, 0.5), 25);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 37);  // position 2.7: 30 + 0.7 * 10
  EXPECT_EQ(percentile({}, 0.5), 0);
  EXPECT_EQ(percentile({3}, 0.99), 3);
}

TEST(BenchStats, QuantilesOfOneHundredValues) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  const Quantiles q = quantiles(v);
  EXPECT_DOUBLE_EQ(q.p50, 50.5);
  EXPECT_DOUBLE_EQ(q.p90, 90.1);
  EXPECT_DOUBLE_EQ(q.p99, 99.01);
  EXPECT_DOUBLE_EQ(q.mean, 50.5);
}

}  // namespace
}  // namespace sluice::bench
