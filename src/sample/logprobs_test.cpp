#include "sample/logprobs.h"

#include <cmath>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Logprobs, LogSoftmaxOfTheTokenAndTheMostLikelyFirst) {
  const float lg[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double sum = 0;
  for (float v : lg) sum += std::exp(static_cast<double>(v));
  const double lse = std::log(sum);
  std::vector<std::pair<int32_t, float>> top;
  const float lp = token_logprobs(lg, 5, 2, 3, &top);
  EXPECT_NEAR(lp, 2.0 - lse, 1e-6);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);  // ties: the lower id first
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_NEAR(top[0].second, 3.0 - lse, 1e-6);
  std::vector<std::pair<int32_t, float>> none;
  token_logprobs(lg, 5, 0, 0, &none);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace sluice
