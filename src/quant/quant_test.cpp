// Quantize -> dequantize round trips, dot products and whole-tensor quantization
// for every DType, with per-format error bounds, guard bytes and poisoned outputs.
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,  DType::kQ4_0,
                               DType::kQ4_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,  DType::kQ5_1,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS};
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Quantizes with guard bytes after the row and dequantizes into a NaN-poisoned
// buffer with guard floats; fails the test if either is overrun.
std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t nbytes = row_bytes(type, n);
  std::vector<uint8_t> q(nbytes + kGuardBytes, kGuard);
  quantize_row(type, x.data(), q.data(), n);
  for (size_t i = nbytes; i < q.size(); ++i) EXPECT_EQ(q[i], kGuard) << "quantize overran";
  std::vector<float> y(x.size() + 16, std::numeric_limits<float>::quiet_NaN());
  dequantize_row(type, q.data(), y.data(), n);
  for (size_t i = x.size(); i < y.size(); ++i) EXPECT_TRUE(std::isnan(y[i])) << "dequantize overran";
  y.resize(x.size());
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  return y;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / a.size());
}

double rms(const std::vector<float>& a) {
  double s = 0.0;
  for (float v : a) s += double(v) * v;
  return std::sqrt(s / a.size());
}

TEST(QuantTest, ZerosStayExactlyZero) {
  for (DType t : kAllTypes) {
    const std::vector<float> x(512, 0.0f);
    const std::vector<float> y = round_trip(t, x);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(QuantTest, FloatRowsRoundTrip) {
  const std::vector<float> x = gaussian(100, 1);  // not a multiple of 32: fine for floats
  EXPECT_EQ(round_trip(DType::kF32, x), x);
  const std::vector<float> h = round_trip(DType::kF16, x);
  const std::vector<float> b = round_trip(DType::kBF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], f16_to_f32(f32_to_f16(x[i])));
    EXPECT_EQ(b[i], bf16_to_f32(f32_to_bf16(x[i])));
    EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1p-11f + 0x1p-25f);
    EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1p-8f);
  }
}

// Q8_0: every element within half a step (plus the f16 rounding of d).
TEST(QuantTest, Q8_0ElementBound) {
  const std::vector<float> x = gaussian(32 * 7, 2, 3.0f);
  const std::vector<float> y = round_trip(DType::kQ8_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(y[b * 32 + i] - x[b * 32 + i]), 0.5f * d + amax * 0x1p-11f) << b << " " << i;
    }
  }
}

// Q4_0: within half a step, except values beyond +7.5 steps on the side opposite
// the largest magnitude, which clamp to q = 15 (at most one full step off).
TEST(QuantTest, Q4_0ElementBound) {
  const std::vector<float> x = gaussian(32 * 9, 3, 0.5f);
  const std::vector<float> y = round_trip(DType::kQ4_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
      if (std::fabs(x[b * 32 + i]) > amax) {
        amax = std::fabs(x[b * 32 + i]);
        max = x[b * 32 + i];
      }
    }
    const float d = amax / 8.0f;
    const float slack = amax * 0x1p-10f;
    for (int i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i];
      const float err = std::fabs(y[b * 32 + i] - v);
      const bool clamped_side = (v * max < 0.0f) && std::fabs(v) > 7.5f * d - slack;
      EXPECT_LE(err, (clamped_side ? 1.0f : 0.5f) * d + slack) << b << " " << i;
    }
  }
}

TEST(QuantTest, Q4_0LargestMagnitudeIsExactUpToF16) {
  std::vector<float> x(32, 0.1f);
  x[5] = -3.0f;  // max magnitude, negative: d = 3/8 > 0, q = 0 -> -8 d = -3
  x[9] = 2.5f;
  const std::vector<float> y = round_trip(DType::kQ4_0, x);
  EXPECT_EQ(y[5], -3.0f);
  EXPECT_NEAR(y[9], 2.625f, 1e-6f);  // 2.5 / 0.375 = 6.67 -> 7 steps
}

struct RmseCase {
  DType type;
  float gaussian_rel;  // bound on rmse / rms for Gaussian data
};

// Bounds sit ~10% above what the reference quantizers reach on N(0, 1) data.
class RoundTripRmse : public ::testing::TestWithParam<RmseCase> {};

TEST_P(RoundTripRmse, Gaussian) {
  const RmseCase c = GetParam();
  const std::vector<float> x = gaussian(256 * 16, 7);
  const double rel = rmse(x, round_trip(c.type, x)) / rms(x);
  EXPECT_LT(rel, c.gaussian_rel) << dtype_name(c.type);
  EXPECT_GT(rel, 0.0);
  RecordProperty("relative_rmse", std::to_string(rel));
}

TEST_P(RoundTripRmse, StructuredData) {
  const RmseCase c = GetParam();
  const int64_t n = 256 * 3;  // several blocks, not one
  std::vector<float> ramp(n), constant(n, 0.75f), negative(n, -1.25f), outliers = gaussian(n, 9);
  for (int64_t i = 0; i < n; ++i) ramp[i] = -2.0f + 4.0f * static_cast<float>(i) / n;
  for (int64_t i = 0; i < n; i += 97) outliers[i] = (i % 2 ? 40.0f : -40.0f);
  for (const auto* x : {&ramp, &constant, &negative}) {
    const double rel = rmse(*x, round_trip(c.type, *x)) / rms(*x);
    EXPECT_LT(rel, c.gaussian_rel) << dtype_name(c.type);
  }
  // An outlier coarsens its own block only: compare against the blocks' ranges.
  const std::vector<float> y = round_trip(c.type, outliers);
  const int64_t bs = dtype_traits(c.type).block_size;
  for (int64_t b = 0; b < n / bs; ++b) {
    float amax = 0.0f;
    for (int64_t i = b * bs; i < (b + 1) * bs; ++i) amax = std::max(amax, std::fabs(outliers[i]));
    for (int64_t i = b * bs; i < (b + 1) * bs; ++i) {
      ASSERT_LE(std::fabs(y[i] - outliers[i]), amax * 0.25f) << dtype_name(c.type) << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllBlockTypes, RoundTripRmse,
                         ::testing::Values(RmseCase{DType::kQ8_0, 0.0058f},
                                           RmseCase{DType::kQ4_0, 0.093f},
                                           RmseCase{DType::kQ4_K, 0.078f},
                                           RmseCase{DType::kQ6_K, 0.0195f},
                                           RmseCase{DType::kQ4_1, 0.078f},
                                           RmseCase{DType::kQ5_0, 0.044f},
                                           RmseCase{DType::kQ5_1, 0.037f},
                                           RmseCase{DType::kQ2_K, 0.31f},
                                           RmseCase{DType::kQ3_K, 0.166f},
                                           RmseCase{DType::kQ5_K, 0.040f},
                                           RmseCase{DType::kIQ4_NL, 0.081f},
                                           RmseCase{DType::kIQ4_XS, 0.082f}),
                         [](const auto& info) { return std::string(dtype_name(info.param.type)); });

TEST(QuantTest, KQuantsBeatLegacyAtSameBits) {
  // Q4_K (4.5 bpw) must be clearly better than Q4_0 (4.5 bpw) on Gaussian data,
  // and Q6_K clearly better than Q4_K.
  const std::vector<float> x = gaussian(256 * 32, 11);
  const double e40 = rmse(x, round_trip(DType::kQ4_0, x));
  const double e4k = rmse(x, round_trip(DType::kQ4_K, x));
  const double e6k = rmse(x, round_trip(DType::kQ6_K, x));
  EXPECT_LT(e4k, 0.9 * e40);
  EXPECT_LT(e6k, 0.35 * e4k);
}

TEST(QuantTest, MoreBitsGiveLessError) {
  // Within each family the error falls as bits per weight rise, and the
  // codebook of IQ4_NL beats the linear grid of Q4_0 at the same 4.5 bits.
  const std::vector<float> x = gaussian(256 * 32, 12);
  auto err = [&](DType t) { return rmse(x, round_trip(t, x)); };
  EXPECT_LT(err(DType::kQ3_K), 0.6 * err(DType::kQ2_K));
  EXPECT_LT(err(DType::kQ4_K), 0.6 * err(DType::kQ3_K));
  EXPECT_LT(err(DType::kQ5_K), 0.6 * err(DType::kQ4_K));
  EXPECT_LT(err(DType::kQ6_K), 0.6 * err(DType::kQ5_K));
  EXPECT_LT(err(DType::kQ5_0), 0.6 * err(DType::kQ4_0));
  EXPECT_LT(err(DType::kQ5_1), 0.6 * err(DType::kQ4_1));
  EXPECT_LT(err(DType::kIQ4_NL), 0.95 * err(DType::kQ4_0));
  EXPECT_LT(err(DType::kIQ4_XS), 0.95 * err(DType::kQ4_0));
}

TEST(QuantTest, ScaleSearchImprovesOnNaiveFit) {
  // Over many random groups the searched fit never loses to the naive min/max
  // fit and wins by a clear margin in total.
  std::mt19937 gen(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  double naive_total = 0.0, searched_total = 0.0;
  for (int g = 0; g < 200; ++g) {
    float x[32], w[32];
    uint8_t q[32], tmp[32];
    for (int i = 0; i < 32; ++i) {
      x[i] = dist(gen);
      w[i] = 1.0f + std::fabs(x[i]);
    }
    float min0 = 0.0f, min1 = 0.0f;
    const float s0 = search_scale_min(32, 15, x, w, q, tmp, &min0, -1.0f, 0.1f, 0);
    const float e0 = weighted_error_type1(32, x, w, q, s0, min0);
    const float s1 = search_scale_min(32, 15, x, w, q, tmp, &min1, -1.0f, 0.1f, 20);
    const float e1 = weighted_error_type1(32, x, w, q, s1, min1);
    EXPECT_LE(e1, e0 * (1.0f + 1e-5f));
    EXPECT_GE(min1, 0.0f);
    naive_total += e0;
    searched_total += e1;
  }
  EXPECT_LT(searched_total, 0.9 * naive_total);
}

TEST(QuantTest, SymmetricSearchMapsLargestToMinusNmax) {
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = 0.1f * static_cast<float>(i) - 0.3f;
  x[3] = 5.0f;
  uint8_t q[16];
  const float scale = search_scale_symmetric(16, 32, x, q, 0);
  EXPECT_EQ(q[3], 0);  // -32 + 32
  EXPECT_NEAR(scale * (q[3] - 32.0f), 5.0f, 0.05f);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(scale * (q[i] - 32.0f), x[i], 0.5f * std::fabs(scale) + 1e-6f);
}

// dot_row against the grouped sum of dequantize_row's output: bit-identical.
TEST(QuantTest, DotRowMatchesDequantizedDotExactly) {
  const int64_t n = 256 * 5;
  const std::vector<float> w = gaussian(n, 21);
  const std::vector<float> x = gaussian(n, 22);
  for (DType t : kAllTypes) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, w.data(), q.data(), n);
    std::vector<float> wd(n);
    dequantize_row(t, q.data(), wd.data(), n);
    const int64_t group = dtype_traits(t).block_size == 1 ? 32 : dtype_traits(t).block_size;
    float total = 0.0f;
    double exact = 0.0;
    for (int64_t g = 0; g < n; g += group) {
      float partial = 0.0f;
      for (int64_t i = g; i < std::min(n, g + group); ++i) partial += wd[i] * x[i];
      total += partial;
    }
    for (int64_t i = 0; i < n; ++i) exact += double(wd[i]) * x[i];
    const float got = dot_row(t, q.data(), x.data(), n);
    EXPECT_EQ(got, total) << dtype_name(t);
    EXPECT_NEAR(got, exact, 1e-4 * std::sqrt(double(n)) * 4.0) << dtype_name(t);
  }
}

TEST(QuantTest, DotRowOfFloatRowsWithTail) {
  const int64_t n = 75;  // two full groups of 32 and a tail of 11
  const std::vector<float> w = gaussian(n, 31), x = gaussian(n, 32);
  double exact = 0.0;
  for (int64_t i = 0; i < n; ++i) exact += double(w[i]) * x[i];
  EXPECT_NEAR(dot_row(DType::kF32, w.data(), x.data(), n), exact, 1e-4);
  std::vector<uint16_t> h(n);
  quantize_row(DType::kF16, w.data(), h.data(), n);
  EXPECT_NEAR(dot_row(DType::kF16, h.data(), x.data(), n), exact, 0.02);
}

TEST(QuantTest, DotRowCheckedOnHandBuiltQ8_0) {
  BlockQ8_0 b{};
  b.d = f32_to_f16(0.5f);
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i - 16);
  std::vector<float> x(32, 1.0f);
  // sum (i - 16) * 0.5 over i = 0..31 = 0.5 * (496 - 512) = -8
  EXPECT_EQ(dot_row(DType::kQ8_0, &b, x.data(), 32), -8.0f);
}

TEST(QuantDeathTest, LengthNotAMultipleOfTheBlockIsABug) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> q(256);
  EXPECT_DEATH(quantize_row(DType::kQ8_0, x.data(), q.data(), 33), "CHECK failed");
  EXPECT_DEATH(dequantize_row(DType::kQ4_K, q.data(), x.data(), 32), "CHECK failed");
}

TEST(QuantTest, QuantizeTensorIsRowByRow) {
  const int64_t n_rows = 3, n_per_row = 512;
  const std::vector<float> m = gaussian(n_rows * n_per_row, 41);
  for (DType t : kAllTypes) {
    const size_t rb = row_bytes(t, n_per_row);
    std::vector<uint8_t> all(rb * n_rows + kGuardBytes, kGuard);
    EXPECT_EQ(quantize_tensor(t, m.data(), all.data(), n_rows, n_per_row), rb * n_rows);
    for (size_t i = rb * n_rows; i < all.size(); ++i) ASSERT_EQ(all[i], kGuard) << dtype_name(t);
    for (int64_t r = 0; r < n_rows; ++r) {
      std::vector<uint8_t> one(rb);
      quantize_row(t, m.data() + r * n_per_row, one.data(), n_per_row);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + r * rb, rb)) << dtype_name(t) << " row " << r;
    }
  }
}

TEST(QuantTest, QuantizeIsDeterministicAndRequantizeIsStable) {
  // Dequantized K-quant data re-quantizes to (nearly) the same values.
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS}) {
    const std::vector<float> x = gaussian(512, 51);
    const std::vector<float> y1 = round_trip(t, x);
    EXPECT_EQ(round_trip(t, x), y1) << dtype_name(t);
    const std::vector<float> y2 = round_trip(t, y1);
    EXPECT_LT(rmse(y1, y2), 0.35 * rmse(x, y1)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace sluice
