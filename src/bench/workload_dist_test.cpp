#include "bench/workload_dist.h"

#include <cmath>

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(WorkloadDist, ParsesEachFormAndRefusesTheRest) {
  auto fixed = parse_dist("--output-len", "128");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->kind, Dist::Kind::kFixed);
  EXPECT_EQ(fixed->a, 128);
  auto uniform = parse_dist("--prompt-len", "uniform:16:256");
  ASSERT_TRUE(uniform.ok());
  EXPECT_EQ(uniform->kind, Dist::Kind::kUniform);
  EXPECT_EQ(uniform->a, 16);
  EXPECT_EQ(uniform->b, 256);
  auto normal = parse_dist("--prompt-len", "normal:64.5:8");
  ASSERT_TRUE(normal.ok());
  EXPECT_EQ(normal->kind, Dist::Kind::kNormal);
  EXPECT_EQ(normal->a, 64.5);
  for (const char* bad : {"", "0", "-3", "1.5", "uniform:8:4", "uniform:0:4", "uniform:4", "normal:10:-1",
                          "normal:x:1", "poisson:3", "uniform:1:2:3"}) {
    auto d = parse_dist("--prompt-len", bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("--prompt-len"), std::string::npos) << d.status().message();
  }
}

TEST(WorkloadDist, ParsesArrivals) {
  auto all = parse_arrival("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->rate, 0);
  auto poisson = parse_arrival("poisson:2.5");
  ASSERT_TRUE(poisson.ok());
  EXPECT_EQ(poisson->rate, 2.5);
  auto ramp = parse_arrival("ramp:20");
  ASSERT_TRUE(ramp.ok());
  EXPECT_EQ(ramp->ramp_s, 20);
  EXPECT_EQ(ramp->rate, 0);
  // Evenly spaced over the ramp, whatever the draw; Poisson adds a gap from
  // the second request; all: every one at 0.
  EXPECT_EQ(ramp->next(0, 0, 4, 0.5), 0);
  EXPECT_EQ(ramp->next(0, 3, 4, 0.9), 15);
  EXPECT_EQ(poisson->next(1.0, 0, 4, 0.5), 1.0);
  EXPECT_NEAR(poisson->next(1.0, 1, 4, 0.5), 1.0 + std::log(2.0) / 2.5, 1e-12);
  EXPECT_EQ(all->next(0, 3, 4, 0.5), 0);
  for (const char* bad : {"poisson:0", "poisson:-1", "poisson:", "some", "poisson:1:2", "ramp:0", "ramp:", "ramp:x"}) {
    EXPECT_FALSE(parse_arrival(bad).ok()) << bad;
  }
}

TEST(WorkloadDist, DrawsStayInRangeAndASeedNamesOneSequence) {
  Rng rng(42), again(42);
  const Dist uniform{.kind = Dist::Kind::kUniform, .a = 3, .b = 5};
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 1000; ++i) {
    const int64_t n = draw(uniform, rng);
    ASSERT_GE(n, 3);
    ASSERT_LE(n, 5);
    ++seen[static_cast<size_t>(n)];
    EXPECT_EQ(draw(uniform, again), n);
  }
  for (int v = 3; v <= 5; ++v) EXPECT_GT(seen[static_cast<size_t>(v)], 250) << v;
  EXPECT_EQ(draw(Dist{.a = 7}, rng), 7);
  // A normal draw is rounded and never below 1; its mean is near MEAN.
  const Dist normal{.kind = Dist::Kind::kNormal, .a = 100, .b = 10};
  double sum = 0;
  for (int i = 0; i < 4000; ++i) {
    const int64_t n = draw(normal, rng);
    ASSERT_GE(n, 1);
    sum += static_cast<double>(n);
  }
  EXPECT_NEAR(sum / 4000, 100, 1.0);
  EXPECT_EQ(draw(Dist{.kind = Dist::Kind::kNormal, .a = -50, .b = 1}, rng), 1);
}

TEST(WorkloadDist, UniformZeroOneIsInTheHalfOpenInterval) {
  Rng rng(7);
  for (int i = 0; i < 10000; ++i) {
    const double u = rng.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace sluice::bench
