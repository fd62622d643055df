#include "bench/op_times.h"

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(OpTimes, MedianPerOperatorInFirstSeenOrder) {
  const std::vector<std::vector<OpTime>> passes = {
      {{.op = "a", .calls = 2, .seconds = 1.0, .flops = 10}, {.op = "b", .calls = 1, .seconds = 5.0}},
      {{.op = "a", .calls = 2, .seconds = 3.0, .flops = 10}, {.op = "c", .calls = 1, .seconds = 4.0, .bytes = 8}},
      {{.op = "a", .calls = 2, .seconds = 2.0, .flops = 10}, {.op = "b", .calls = 1, .seconds = 6.0}},
  };
  const std::vector<OpTime> m = median_op_times(passes);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].op, "a");
  EXPECT_EQ(m[0].seconds, 2.0);
  EXPECT_EQ(m[0].calls, 2);
  EXPECT_EQ(m[0].flops, 10);
  EXPECT_EQ(m[1].op, "b");
  EXPECT_EQ(m[1].seconds, 5.0) << "a pass without the operator counts 0: median of {5, 0, 6}";
  EXPECT_EQ(m[2].op, "c");
  EXPECT_EQ(m[2].seconds, 0.0) << "median of {0, 4, 0}";
  EXPECT_EQ(m[2].bytes, 8);
  EXPECT_TRUE(median_op_times({}).empty());
}

TEST(OpTimes, TableShowsSharesRatesAndRoofs) {
  const std::vector<OpTime> rows = {
      {.op = "matmul", .calls = 4, .seconds = 0.003, .flops = 6e9, .bytes = 3e9},
      {.op = "norm", .calls = 4, .seconds = 0.001},
  };
  const std::string t = op_times_table(rows, {.title = "op times, tg2", .per = 2, .per_label = "ms/token",
                                              .pass_seconds = 0.005, .roof_gbps = 2000});
  EXPECT_EQ(t.rfind("op times, tg2\n", 0), 0u) << t;
  EXPECT_NE(t.find("ms/token"), std::string::npos) << t;
  // matmul: 1.5 ms a token, 75% of the ops, 2000 GFLOP/s, 1000 GB/s = 50% of the 2000 GB/s roof.
  EXPECT_NE(t.find("| matmul                   |      4 |     1.5000 |  75.0% |    2000.0 |   1000.0 |   50.0% |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| norm                     |      4 |     0.5000 |  25.0% |           |          |         |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| sum of the ops           |        |     2.0000 | 100.0% |    1500.0 |    750.0 |   37.5% |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("pass: 2.5000 ms/token on the host's clock (the ops' sum is 80.0% of it)"), std::string::npos) << t;

  // Without a bandwidth roof, the FLOPs' roof; without either, no share.
  const std::string f = op_times_table(rows, {.title = "pp", .per_label = "ms", .roof_gflops = 4000});
  EXPECT_NE(f.find("|    2000.0 |   1000.0 |   50.0% |"), std::string::npos) << f;
  EXPECT_EQ(f.find("pass:"), std::string::npos) << f;
  const std::string n = op_times_table(rows, {.title = "pp", .per_label = "ms"});
  EXPECT_NE(n.find("|    2000.0 |   1000.0 |         |"), std::string::npos) << n;
}

}  // namespace
}  // namespace sluice::bench
