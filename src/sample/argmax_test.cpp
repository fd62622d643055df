#include "sample/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace sluice {
namespace {

const float kInf = std::numeric_limits<float>::infinity();

TEST(ArgmaxTest, EdgeCases) {
  EXPECT_EQ(argmax_logits(nullptr, 0), 0);
  std::vector<float> x(37, std::nanf(""));
  EXPECT_EQ(argmax_logits(x.data(), 37), 0);  // nothing above -inf
  x.assign(37, -kInf);
  EXPECT_EQ(argmax_logits(x.data(), 37), 0);
  x[30] = -1e30f;
  EXPECT_EQ(argmax_logits(x.data(), 37), 30);
  x[36] = kInf;
  x[33] = kInf;
  EXPECT_EQ(argmax_logits(x.data(), 37), 33);  // first of equal maxima, in the tail
  std::vector<float> z = {-0.0f, 0.0f, -1.0f};
  EXPECT_EQ(argmax_logits(z.data(), 3), 0);  // +0 == -0: the first
}

// Random lengths (the vector body, the 8-wide loop and the tail), many ties,
// NaN, +-inf: the same index as the scalar scan, at every position of the max.
TEST(ArgmaxTest, MatchesScalarScan) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t n = static_cast<int32_t>(rng() % 300);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const uint32_t r = rng() % 32;
      if (r == 0) v = std::nanf("");
      else if (r == 1) v = -kInf;
      else if (r == 2) v = trial % 7 == 0 ? kInf : -0.0f;
      else v = static_cast<float>(static_cast<int>(rng() % 16) - 8);
    }
    ASSERT_EQ(argmax_logits(x.data(), n), argmax_logits_scalar(x.data(), n)) << "trial " << trial << " n " << n;
  }
}

TEST(ArgmaxTest, VocabularySizedLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(32000);
  for (int trial = 0; trial < 20; ++trial) {
    for (float& v : x) v = nd(rng);
    const int32_t at = static_cast<int32_t>(rng() % x.size());
    x[static_cast<size_t>(at)] = 100.0f;
    EXPECT_EQ(argmax_logits(x.data(), 32000), at);
    EXPECT_EQ(argmax_logits_scalar(x.data(), 32000), at);
  }
}

}  // namespace
}  // namespace sluice
