#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/alloc_count_test_util.h"

namespace sluice {
namespace {

// All filters off, temperature 1: the distribution is the plain softmax.
SamplingParams plain_params(uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> softmax(const std::vector<float>& l) {
  const float m = *std::max_element(l.begin(), l.end());
  std::vector<float> p(l.size());
  double s = 0.0;
  for (size_t i = 0; i < l.size(); ++i) s += (p[i] = std::exp(l[i] - m));
  for (float& v : p) v = static_cast<float>(v / s);
  return p;
}

std::vector<float> logits_from_probs(const std::vector<float>& p) {
  std::vector<float> l(p.size());
  for (size_t i = 0; i < p.size(); ++i) l[i] = std::log(p[i]);
  return l;
}

std::vector<float> distribution_of(Sampler& s, const std::vector<float>& logits) {
  std::vector<float> probs(logits.size(), -1.0f);
  s.distribution(logits.data(), probs.data());
  return probs;
}

int count_nonzero(const std::vector<float>& p) {
  return static_cast<int>(std::count_if(p.begin(), p.end(), [](float v) { return v > 0.0f; }));
}

std::vector<float> test_logits(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> l(n);
  for (float& v : l) v = 4.0f * rng.uniform() - 2.0f;
  return l;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  SamplingParams p = plain_params();
  p.temperature = 0.0f;
  Sampler s(p, 6);
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.sample(l.data()), 1);
  const std::vector<float> probs = distribution_of(s, l);
  EXPECT_EQ(probs, (std::vector<float>{0, 1, 0, 0, 0, 0}));
  p.temperature = -1.0f;
  Sampler s2(p, 6);
  const std::vector<float> l2 = {0.1f, 2.0f, -1.0f, 2.5f, 1.9f, 0.0f};
  EXPECT_EQ(s2.sample(l2.data()), 3);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedsDiffer) {
  SamplingParams p;  // defaults: every filter on
  p.seed = 1234;
  Sampler a(p, 300), b(p, 300);
  p.seed = 1235;
  Sampler c(p, 300);
  std::vector<int32_t> ta, tb, tc;
  for (int step = 0; step < 200; ++step) {
    const std::vector<float> l = test_logits(300, 100 + step);
    ta.push_back(a.sample(l.data()));
    tb.push_back(b.sample(l.data()));
    tc.push_back(c.sample(l.data()));
    a.accept(ta.back());
    b.accept(tb.back());
    c.accept(tc.back());
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  // reset() restarts both the RNG and the history.
  a.reset(1234);
  std::vector<int32_t> again;
  for (int step = 0; step < 200; ++step) {
    const std::vector<float> l = test_logits(300, 100 + step);
    again.push_back(a.sample(l.data()));
    a.accept(again.back());
  }
  EXPECT_EQ(again, ta);
}

TEST(SamplerTest, SampleEqualsSampleFromDistribution) {
  SamplingParams p;
  p.seed = 99;
  p.repeat_penalty = 1.3f;
  Sampler a(p, 200), b(p, 200);
  std::vector<float> probs(200);
  for (int step = 0; step < 100; ++step) {
    const std::vector<float> l = test_logits(200, 7 * step + 1);
    const int32_t ta = a.sample(l.data());
    b.distribution(l.data(), probs.data());
    const int32_t tb = b.sample_from(probs.data());
    ASSERT_EQ(ta, tb) << "step " << step;
    EXPECT_GT(probs[ta], 0.0f);
    a.accept(ta);
    b.accept(tb);
  }
}

TEST(SamplerTest, TopKKeepsExactlyK) {
  SamplingParams p = plain_params();
  p.top_k = 5;
  Sampler s(p, 100);
  const std::vector<float> l = test_logits(100, 3);
  const std::vector<float> probs = distribution_of(s, l);
  EXPECT_EQ(count_nonzero(probs), 5);
  std::vector<float> sorted = l;
  std::sort(sorted.rbegin(), sorted.rend());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(probs[i] > 0.0f, l[i] >= sorted[4]) << i;
  // The survivors keep their relative probabilities.
  double sum = 0.0;
  for (int i = 0; i < 100; ++i) sum += probs[i] > 0 ? std::exp(double(l[i])) : 0.0;
  for (int i = 0; i < 100; ++i) {
    if (probs[i] > 0) {
      EXPECT_NEAR(probs[i], std::exp(double(l[i])) / sum, 1e-6);
    }
  }
}

TEST(SamplerTest, TopKTiesKeepLowerIds) {
  SamplingParams p = plain_params();
  p.top_k = 3;
  Sampler s(p, 6);
  const std::vector<float> l = {1.0f, 5.0f, 1.0f, 1.0f, 0.0f, 1.0f};
  const std::vector<float> probs = distribution_of(s, l);
  EXPECT_GT(probs[1], 0.0f);
  EXPECT_GT(probs[0], 0.0f);
  EXPECT_GT(probs[2], 0.0f);
  EXPECT_EQ(probs[3], 0.0f);
  EXPECT_EQ(probs[5], 0.0f);
  EXPECT_EQ(count_nonzero(probs), 3);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  SamplingParams p = plain_params();
  const std::vector<float> l = logits_from_probs({0.1f, 0.4f, 0.2f, 0.3f});
  p.top_p = 0.65f;  // 0.4 < 0.65 <= 0.4 + 0.3
  Sampler s(p, 4);
  std::vector<float> probs = distribution_of(s, l);
  EXPECT_NEAR(probs[1], 0.4f / 0.7f, 1e-6);
  EXPECT_NEAR(probs[3], 0.3f / 0.7f, 1e-6);
  EXPECT_EQ(probs[0], 0.0f);
  EXPECT_EQ(probs[2], 0.0f);

  p.top_p = 0.75f;  // needs 0.4 + 0.3 + 0.2
  Sampler s2(p, 4);
  probs = distribution_of(s2, l);
  EXPECT_EQ(count_nonzero(probs), 3);
  EXPECT_EQ(probs[0], 0.0f);
  EXPECT_NEAR(probs[2], 0.2f / 0.9f, 1e-6);

  p.top_p = 0.3f;  // the top token alone reaches it
  Sampler s3(p, 4);
  probs = distribution_of(s3, l);
  EXPECT_EQ(probs, (std::vector<float>{0, 1, 0, 0}));
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  SamplingParams p = plain_params();
  p.top_k = 2;
  p.top_p = 0.6f;
  // After top-k: {0.4, 0.3} renormalized to {0.571, 0.429}: 0.571 < 0.6 -> both stay.
  Sampler s(p, 4);
  const std::vector<float> probs = distribution_of(s, logits_from_probs({0.1f, 0.4f, 0.2f, 0.3f}));
  EXPECT_NEAR(probs[1], 0.4f / 0.7f, 1e-6);
  EXPECT_NEAR(probs[3], 0.3f / 0.7f, 1e-6);
}

TEST(SamplerTest, MinPIsRelativeToTheMaxProbability) {
  SamplingParams p = plain_params();
  p.min_p = 0.19f;  // threshold 0.19 * 0.5 = 0.095
  Sampler s(p, 5);
  const std::vector<float> l = logits_from_probs({0.5f, 0.2f, 0.1f, 0.09f, 0.11f});
  const std::vector<float> probs = distribution_of(s, l);
  EXPECT_EQ(probs[3], 0.0f);
  EXPECT_EQ(count_nonzero(probs), 4);
  EXPECT_NEAR(probs[0], 0.5f / 0.91f, 1e-6);
  EXPECT_NEAR(probs[4], 0.11f / 0.91f, 1e-6);
  // Scaling all logits by a constant offset changes nothing (relative threshold).
  std::vector<float> shifted = l;
  for (float& v : shifted) v += 30.0f;
  const std::vector<float> probs2 = distribution_of(s, shifted);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(probs2[i], probs[i], 1e-6);
}

TEST(SamplerTest, TemperatureScalesLogitsBeforeFilters) {
  SamplingParams p = plain_params();
  p.temperature = 0.5f;
  Sampler s(p, 3);
  const std::vector<float> l = {1.0f, 0.0f, -1.0f};
  const std::vector<float> probs = distribution_of(s, l);
  const std::vector<float> want = softmax({2.0f, 0.0f, -2.0f});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(probs[i], want[i], 1e-6);
}

TEST(SamplerTest, PenaltiesExactArithmetic) {
  SamplingParams p = plain_params();
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p, 5);
  for (int32_t t : {0, 0, 1, 3}) s.accept(t);
  const std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  // t0: 2/2 - (2*0.5 + 0.25) = -0.25    t1: -1*2 - (0.5 + 0.25) = -2.75
  // t2: unseen 0.5                      t3: 3/2 - 0.75 = 0.75      t4: 0
  const std::vector<float> want = softmax({-0.25f, -2.75f, 0.5f, 0.75f, 0.0f});
  const std::vector<float> probs = distribution_of(s, l);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(probs[i], want[i], 1e-6) << i;

  // Greedy sees the penalized logits too: presence 2 pushes token 3 below token 2.
  p.temperature = 0.0f;
  p.presence_penalty = 2.0f;
  Sampler g(p, 5);
  g.accept(3);
  const std::vector<float> l2 = {0.1f, -1.0f, 0.5f, 3.0f, 0.0f};
  EXPECT_EQ(g.sample(l2.data()), 2);  // t3: 3/2 - (1*0.5 + 2) = -1 < 0.5
}

TEST(SamplerTest, PenaltyWindow) {
  SamplingParams p = plain_params();
  p.presence_penalty = 1.0f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  for (int32_t t : {0, 0, 1, 3}) s.accept(t);  // window: {1, 3}
  const std::vector<float> l = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> want = softmax({0.0f, -1.0f, 0.0f, -1.0f});
  std::vector<float> probs = distribution_of(s, l);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(probs[i], want[i], 1e-6) << i;

  p.repeat_last_n = -1;  // whole history
  Sampler all(p, 4);
  for (int32_t t : {0, 0, 1, 3}) all.accept(t);
  want = softmax({-1.0f, -1.0f, 0.0f, -1.0f});
  probs = distribution_of(all, l);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(probs[i], want[i], 1e-6) << i;

  p.repeat_last_n = 0;  // off
  Sampler off(p, 4);
  for (int32_t t : {0, 0, 1, 3}) off.accept(t);
  probs = distribution_of(off, l);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(probs[i], 0.25f, 1e-6) << i;
}

TEST(SamplerTest, DistributionSumsToOneWithZerosWhereFiltered) {
  SamplingParams p;  // defaults
  Sampler s(p, 1000);
  for (int trial = 0; trial < 5; ++trial) {
    const std::vector<float> probs = distribution_of(s, test_logits(1000, 50 + trial));
    double sum = 0.0;
    for (float v : probs) {
      ASSERT_GE(v, 0.0f);
      sum += v;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_LE(count_nonzero(probs), 40);
    EXPECT_GE(count_nonzero(probs), 1);
  }
}

TEST(SamplerTest, NanAndMinusInfinityLogits) {
  SamplingParams p = plain_params();
  Sampler s(p, 4);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l = {std::nanf(""), -inf, 1.0f, 1.0f};
  std::vector<float> probs = distribution_of(s, l);
  EXPECT_EQ(probs, (std::vector<float>{0.0f, 0.0f, 0.5f, 0.5f}));
  l = {-inf, -inf, -inf, -inf};
  probs = distribution_of(s, l);
  EXPECT_EQ(probs, (std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(s.sample(l.data()), 0);
}

// Greedy without penalties scans the logits in place; with a penalty that has
// no history yet it goes through the penalized copy. Both must pick the same
// id: the lowest of the largest, NaN as -inf, 0 when nothing is finite.
TEST(SamplerTest, GreedyScanInPlaceMatchesPenalizedCopy) {
  SamplingParams plain = plain_params();
  plain.temperature = 0.0f;
  SamplingParams penalized = plain;
  penalized.presence_penalty = 0.5f;  // on, but nothing accepted yet
  const int32_t n = 257;
  Sampler a(plain, n), b(penalized, n);
  const float inf = std::numeric_limits<float>::infinity();
  std::srand(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> l(n);
    for (float& v : l) {
      const int r = std::rand() % 16;
      v = r == 0 ? std::nanf("") : r == 1 ? -inf : static_cast<float>(std::rand() % 8);  // many ties
    }
    if (trial % 50 == 0) std::fill(l.begin(), l.end(), trial % 100 == 0 ? std::nanf("") : -inf);
    if (trial % 50 == 1) l[0] = std::nanf("");
    EXPECT_EQ(a.sample(l.data()), b.sample(l.data())) << "trial " << trial;
  }
  std::vector<float> l(n, std::nanf(""));
  EXPECT_EQ(a.sample(l.data()), 0);
  l[n - 1] = -inf;
  l[5] = 3.0f;
  l[9] = 3.0f;
  EXPECT_EQ(a.sample(l.data()), 5);
}

// Upper 0.1% points of the chi-square distribution, by degrees of freedom.
double chi2_critical_999(int df) {
  static const double kTable[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46,
                                  24.32, 26.12, 27.88, 29.59, 31.26, 32.91};
  return kTable[df];
}

// Chi-square statistic of counts against expected probabilities (cells with
// expected 0 must be empty; a count there makes the statistic infinite).
double chi2(const std::vector<int>& counts, const std::vector<float>& expected, int n, int* df) {
  double stat = 0.0;
  *df = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0.0f) {
      if (counts[i] > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double e = double(n) * expected[i];
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++*df;
  }
  return stat;
}

TEST(SamplerTest, SampleFrequenciesMatchDistributionChiSquare) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 8;
  p.top_p = 0.97f;
  p.min_p = 0.03f;
  p.seed = 2024;
  const int n_vocab = 12;
  Sampler s(p, n_vocab);
  const std::vector<float> l = {0.3f, 1.2f, -0.4f, 2.0f, 0.9f, -2.5f,
                                1.6f, 0.0f, -1.0f, 1.1f, 0.6f, -3.0f};
  const std::vector<float> probs = distribution_of(s, l);
  const int n_draws = 40000;
  std::vector<int> counts(n_vocab, 0);
  for (int i = 0; i < n_draws; ++i) ++counts[s.sample(l.data())];

  int df = 0;
  const double stat = chi2(counts, probs, n_draws, &df);
  ASSERT_GE(df, 3);
  ASSERT_LE(df, 12);
  EXPECT_LT(stat, chi2_critical_999(df)) << "df " << df;

  // The same test rejects a slightly wrong distribution: move 0.015 of mass
  // from the most to the least likely survivor.
  std::vector<float> wrong = probs;
  const auto hi = std::max_element(wrong.begin(), wrong.end()) - wrong.begin();
  int lo = -1;
  for (int i = 0; i < n_vocab; ++i) {
    if (wrong[i] > 0 && (lo < 0 || wrong[i] < wrong[lo])) lo = i;
  }
  wrong[hi] -= 0.015f;
  wrong[lo] += 0.015f;
  int df_wrong = 0;
  const double stat_wrong = chi2(counts, wrong, n_draws, &df_wrong);
  EXPECT_GT(stat_wrong, chi2_critical_999(df_wrong));
  RecordProperty("chi2", std::to_string(stat));
  RecordProperty("chi2_wrong", std::to_string(stat_wrong));
  RecordProperty("df", std::to_string(df));
}

TEST(SamplerTest, SampleFromMatchesGivenDistributionChiSquare) {
  Sampler s(plain_params(77), 6);
  const std::vector<float> given = {0.05f, 0.0f, 0.35f, 0.2f, 0.1f, 0.3f};
  const int n_draws = 30000;
  std::vector<int> counts(6, 0);
  for (int i = 0; i < n_draws; ++i) ++counts[s.sample_from(given.data())];
  int df = 0;
  EXPECT_EQ(counts[1], 0);
  const double stat = chi2(counts, given, n_draws, &df);
  EXPECT_EQ(df, 4);
  EXPECT_LT(stat, chi2_critical_999(df));
  // Unnormalized weights give the same distribution.
  std::vector<float> scaled = given;
  for (float& v : scaled) v *= 7.0f;
  Sampler a(plain_params(5), 6), b(plain_params(5), 6);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample_from(given.data()), b.sample_from(scaled.data()));
}

TEST(SamplerTest, NoAllocationPerCall) {
  SamplingParams p;
  p.repeat_penalty = 1.1f;
  p.top_k = 0;  // full sort for top-p
  Sampler s(p, 5000);
  const std::vector<float> l = test_logits(5000, 8);
  std::vector<float> probs(5000);
  testing::g_allocations = 0;
  testing::g_counting = true;
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(l.data());
    s.accept(t);
    s.distribution(l.data(), probs.data());
    s.sample_from(probs.data());
  }
  testing::g_counting = false;
  EXPECT_EQ(testing::g_allocations.load(), 0);
}

TEST(SamplerTest, ValidationNamesTheBadField) {
  EXPECT_TRUE(validate_sampling_params(SamplingParams{}).ok());
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* field;
    SamplingParams params;
  };
  std::vector<Case> cases;
  auto add = [&](const char* field, auto mutate) {
    SamplingParams p;
    mutate(p);
    cases.push_back({field, p});
  };
  add("temperature", [&](SamplingParams& p) { p.temperature = nan; });
  add("temperature", [&](SamplingParams& p) { p.temperature = inf; });
  add("top_p", [&](SamplingParams& p) { p.top_p = 0.0f; });
  add("top_p", [&](SamplingParams& p) { p.top_p = nan; });
  add("min_p", [&](SamplingParams& p) { p.min_p = 1.5f; });
  add("min_p", [&](SamplingParams& p) { p.min_p = nan; });
  add("repeat_penalty", [&](SamplingParams& p) { p.repeat_penalty = 0.0f; });
  add("repeat_penalty", [&](SamplingParams& p) { p.repeat_penalty = -1.0f; });
  add("repeat_last_n", [&](SamplingParams& p) { p.repeat_last_n = -2; });
  add("frequency_penalty", [&](SamplingParams& p) { p.frequency_penalty = inf; });
  add("presence_penalty", [&](SamplingParams& p) { p.presence_penalty = nan; });
  for (const Case& c : cases) {
    const Status st = validate_sampling_params(c.params);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
  }
  // Values documented as "off" are valid.
  SamplingParams off;
  off.temperature = -1.0f;
  off.top_k = -5;
  off.top_p = 1.5f;
  off.min_p = -0.5f;
  off.repeat_last_n = -1;
  EXPECT_TRUE(validate_sampling_params(off).ok());
}

}  // namespace
}  // namespace sluice
