// f16 / bf16 conversions (base/half.h) as the quantized formats rely on them:
// round to nearest even, subnormals, overflow, inf and nan.
#include "base/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace sluice {
namespace {

TEST(HalfTest, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
}

TEST(HalfTest, F16RoundsToNearestEven) {
  // Halfway between 1 and 1 + 2^-10: ties to the even mantissa (1).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  // Halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even): rounds up.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
  // Rounding may carry into the exponent: 2 - 2^-12 -> 2.
  EXPECT_EQ(f32_to_f16(2.0f - 0x1p-12f), 0x4000);
}

TEST(HalfTest, F16OverflowAndSpecials) {
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);   // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);   // halfway, odd mantissa: rounds to inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7C00)));
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
}

TEST(HalfTest, F16Subnormals) {
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);       // tie -> even (0)
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);   // tie between 1 and 2 -> 2
  EXPECT_EQ(f32_to_f16(0x1p-26f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0x1p-24f), 0x8001);
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
}

TEST(HalfTest, F16EveryValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(HalfTest, Bf16RoundsToNearestEven) {
  auto from_bits = [](uint32_t u) { return bits_to_float(u); };
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even below
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, odd below -> up
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F807FFF)), 0x3F80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // f32 subnormal tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN (never rounds into inf), even with only low payload bits.
  const uint16_t nan = f32_to_bf16(from_bits(0x7F800001));
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_EQ(bf16_to_f32(0x0001), from_bits(0x00010000));
}

TEST(HalfTest, Bf16EveryValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), b) << std::hex << b;
  }
}

}  // namespace
}  // namespace sluice
