#include "sample/rng.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(RngTest, Splitmix64PublishedValues) {
  // splitmix64 from state 0 (the sequence its reference implementation prints).
  uint64_t state = 0;
  EXPECT_EQ(splitmix64(&state), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(&state), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(splitmix64(&state), 0x06C45D188009454Full);
}

TEST(RngTest, Xoshiro256StarStarPublishedValues) {
  // Reference outputs of xoshiro256** from state {1, 2, 3, 4}.
  Rng rng = Rng::from_state(1, 2, 3, 4);
  const uint64_t expected[] = {11520ull,
                               0ull,
                               1509978240ull,
                               1215971899390074240ull,
                               1216172134540287360ull,
                               607988272756665600ull,
                               16172922978634559625ull,
                               8476171486693032832ull,
                               10595114339597558777ull,
                               2904607092377533576ull};
  for (uint64_t e : expected) EXPECT_EQ(rng.next(), e);
}

TEST(RngTest, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(42), b(42), c(43);
  bool any_diff = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    any_diff |= (x != c.next());
  }
  EXPECT_TRUE(any_diff);
  a.seed_with(42);
  Rng d(42);
  EXPECT_EQ(a.next(), d.next());
}

TEST(RngTest, UniformInRangeWithMeanOneHalf) {
  Rng rng(7);
  double sum = 0.0, sum_d = 0.0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    const double v = rng.uniform_double();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    sum_d += v;
  }
  // Standard error of the mean is sqrt(1/12/n) ~ 0.00065.
  EXPECT_NEAR(sum / n, 0.5, 0.004);
  EXPECT_NEAR(sum_d / n, 0.5, 0.004);
}

}  // namespace
}  // namespace sluice
