// Hand-built blocks of the formats in quant/blocks_more.h: the bytes are written
// out from the layout description (not from the quantizers), then dequantize_row
// must produce exactly the floats the format defines.
#include "quant/blocks_more.h"

#include <gtest/gtest.h>

#include <vector>

#include "quant/quant.h"

namespace sluice {
namespace {

void push_u16(std::vector<uint8_t>& bytes, uint16_t v) {
  bytes.push_back(static_cast<uint8_t>(v & 0xff));
  bytes.push_back(static_cast<uint8_t>(v >> 8));
}

// f16 bits of small exact values used below.
constexpr uint16_t kHalf0_25 = 0x3400, kHalf0_5 = 0x3800, kHalf1 = 0x3C00, kHalf2 = 0x4000;
constexpr uint16_t kHalfMinus1 = 0xBC00;

std::vector<float> dequant(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(bytes.size(), row_bytes(t, n)) << dtype_name(t);
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, bytes.data(), out.data(), n);
  return out;
}

// Their field offsets: BlocksTest.FieldOffsetsMatchGgml (every block's, in one place).
TEST(BlocksMoreTest, TypeIdsMatchGgml) {
  EXPECT_EQ(dtype_from_ggml(3), DType::kQ4_1);
  EXPECT_EQ(dtype_from_ggml(6), DType::kQ5_0);
  EXPECT_EQ(dtype_from_ggml(7), DType::kQ5_1);
  EXPECT_EQ(dtype_from_ggml(10), DType::kQ2_K);
  EXPECT_EQ(dtype_from_ggml(11), DType::kQ3_K);
  EXPECT_EQ(dtype_from_ggml(13), DType::kQ5_K);
  EXPECT_EQ(dtype_from_ggml(20), DType::kIQ4_NL);
  EXPECT_EQ(dtype_from_ggml(23), DType::kIQ4_XS);
  EXPECT_EQ(dtype_from_ggml(15), std::nullopt);  // q8_K: activations only
  EXPECT_EQ(dtype_from_name("Q5_K"), DType::kQ5_K);
  EXPECT_EQ(dtype_from_name("iq4_xs"), DType::kIQ4_XS);
}

TEST(BlocksMoreTest, Q4_1HandBuilt) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf0_5);     // d
  push_u16(b, kHalfMinus1);  // m
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  const std::vector<float> y = dequant(DType::kQ4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 1.0f) << j;
  }
}

TEST(BlocksMoreTest, Q5_0HandBuiltHighBits) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf0_25);
  // High bits: elements 0, 9, 17 and 31 (bits of the LE uint32 qh).
  const uint32_t qh = (1u << 0) | (1u << 9) | (1u << 17) | (1u << 31);
  for (int k = 0; k < 4; ++k) b.push_back(static_cast<uint8_t>(qh >> (8 * k)));
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | (3 << 4)));
  const std::vector<float> y = dequant(DType::kQ5_0, b, 32);
  for (int i = 0; i < 32; ++i) {
    const int low = i < 16 ? i : 3;
    const int q = low | (((qh >> i) & 1) << 4);
    EXPECT_EQ(y[i], 0.25f * (q - 16)) << i;
  }
  EXPECT_EQ(y[0], 0.0f);    // q = 16
  EXPECT_EQ(y[31], 0.75f);  // q = 3 + 16
}

TEST(BlocksMoreTest, Q5_1HandBuilt) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf1);
  push_u16(b, kHalf2);
  for (int k = 0; k < 4; ++k) b.push_back(0xF0);  // high bits of elements 8k+4 .. 8k+7
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(1 | (2 << 4)));
  const std::vector<float> y = dequant(DType::kQ5_1, b, 32);
  for (int i = 0; i < 32; ++i) {
    const int q = (i < 16 ? 1 : 2) + ((i % 8) >= 4 ? 16 : 0);
    EXPECT_EQ(y[i], static_cast<float>(q) + 2.0f) << i;
  }
}

TEST(BlocksMoreTest, Q2_KHandBuilt) {
  std::vector<uint8_t> b;
  for (int s = 0; s < 16; ++s) b.push_back(static_cast<uint8_t>((s % 4 + 1) | ((s % 3) << 4)));  // sc | m << 4
  // qs[32h + l] = bit pattern giving element 128h + 32j + l the quant (j + l) & 3.
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      uint8_t v = 0;
      for (int j = 0; j < 4; ++j) v |= static_cast<uint8_t>(((j + l) & 3) << (2 * j));
      b.push_back(v);
    }
  push_u16(b, kHalf0_5);   // d
  push_u16(b, kHalf0_25);  // dmin
  const std::vector<float> y = dequant(DType::kQ2_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 16, j = e % 128 / 32, l = e % 32;
    const float expect = 0.5f * (s % 4 + 1) * ((j + l) & 3) - 0.25f * (s % 3);
    ASSERT_EQ(y[e], expect) << e;
  }
}

TEST(BlocksMoreTest, Q3_KHandBuilt) {
  std::vector<uint8_t> b;
  // hmask[l]: bit 4h + j set for elements with l odd -> those get q + 4.
  for (int l = 0; l < 32; ++l) b.push_back(l % 2 ? 0xFF : 0x00);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) b.push_back(static_cast<uint8_t>(0b11100100));  // j -> low bits j
  // 6-bit scales sc[s] = 32 + s - 8 (value s - 8): low 4 bits then high 2 bits.
  uint8_t scales[12] = {};
  for (int s = 0; s < 16; ++s) {
    const int sc = 32 + s - 8;
    scales[s % 8] |= static_cast<uint8_t>((sc & 15) << (s < 8 ? 0 : 4));
    scales[8 + s % 4] |= static_cast<uint8_t>((sc >> 4) << (2 * (s / 4)));
  }
  b.insert(b.end(), scales, scales + 12);
  push_u16(b, kHalf0_5);
  const std::vector<float> y = dequant(DType::kQ3_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 16, j = e % 128 / 32, l = e % 32;
    const int q = j + (l % 2 ? 4 : 0);
    ASSERT_EQ(y[e], 0.5f * (s - 8) * (q - 4)) << e;
  }
  EXPECT_EQ(y[0], 0.5f * -8 * -4);  // element 0: s 0, j 0, l 0 -> q 0
}

TEST(BlocksMoreTest, Q5_KHandBuilt) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf1);     // d
  push_u16(b, kHalf0_5);   // dmin
  // Scales as in Q4_K: sc[s] = s + 1, m[s] = 2 s (s < 4 in low 6 bits directly).
  uint8_t sc[8], m[8], packed[12];
  for (int s = 0; s < 8; ++s) {
    sc[s] = static_cast<uint8_t>(s + 1);
    m[s] = static_cast<uint8_t>(2 * s);
  }
  q4_k_pack_scales(sc, m, packed);
  b.insert(b.end(), packed, packed + 12);
  for (int l = 0; l < 32; ++l) b.push_back(static_cast<uint8_t>(l % 2 ? 0xAA : 0x55));  // qh
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.push_back(static_cast<uint8_t>((l & 15) | ((15 - (l & 15)) << 4)));
  const std::vector<float> y = dequant(DType::kQ5_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64, l = r % 32, sub = e / 32;
    const int low = r < 32 ? (l & 15) : 15 - (l & 15);
    const int bit = 2 * c + r / 32;  // 0x55 has the even bits, 0xAA the odd ones
    const int high = (l % 2 ? (bit % 2 == 1) : (bit % 2 == 0)) ? 1 : 0;
    const float expect = 1.0f * (sub + 1) * (low + 16 * high) - 0.5f * (2 * sub);
    ASSERT_EQ(y[e], expect) << e;
  }
}

TEST(BlocksMoreTest, Iq4NlHandBuilt) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf0_5);
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  const std::vector<float> y = dequant(DType::kIQ4_NL, b, 32);
  EXPECT_EQ(y[0], 0.5f * -127);
  EXPECT_EQ(y[8], 0.5f * 1);
  EXPECT_EQ(y[15], 0.5f * 113);
  EXPECT_EQ(y[16], 0.5f * 113);  // high nibble of byte 0 = 15
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[16 + j], 0.5f * kIq4NlValues[15 - j]) << j;
}

TEST(BlocksMoreTest, Iq4XsHandBuilt) {
  std::vector<uint8_t> b;
  push_u16(b, kHalf0_25);  // d
  // ls[s] = 32 + s - 4  (value s - 4): low 4 bits in scales_l, high 2 in scales_h.
  uint16_t scales_h = 0;
  uint8_t scales_l[4] = {};
  for (int s = 0; s < 8; ++s) {
    const int ls = 32 + s - 4;
    scales_l[s / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (s % 2)));
    scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * s));
  }
  push_u16(b, scales_h);
  b.insert(b.end(), scales_l, scales_l + 4);
  for (int s = 0; s < 8; ++s)
    for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(((j + s) & 15) | (j << 4)));
  const std::vector<float> y = dequant(DType::kIQ4_XS, b, 256);
  for (int s = 0; s < 8; ++s)
    for (int i = 0; i < 32; ++i) {
      const int idx = i < 16 ? ((i + s) & 15) : i - 16;
      ASSERT_EQ(y[32 * s + i], 0.25f * (s - 4) * kIq4NlValues[idx]) << s << " " << i;
    }
}

// The word-level scale decoders the SIMD kernels use give every scalar
// accessor's value, for scale bytes that set every bit pattern in turn.
TEST(BlocksMoreTest, WordScaleDecodersEqualTheScalarAccessors) {
  for (int v = 0; v < 256; ++v) {
    uint8_t q3[12];
    for (int i = 0; i < 12; ++i) q3[i] = static_cast<uint8_t>(v * 7 + 31 * i + (v >> 3) * i);
    uint64_t lo = 0, hi = 0;
    q3_k_scales16(q3, &lo, &hi);
    for (int s = 0; s < 16; ++s)
      ASSERT_EQ(((s < 8 ? lo : hi) >> (8 * (s % 8))) & 0xFF, static_cast<uint64_t>(q3_k_scale(q3, s))) << v << " " << s;
    BlockIq4Xs b{};
    b.scales_h = static_cast<uint16_t>(v * 0x0101 ^ (v << 5));
    for (int i = 0; i < 4; ++i) b.scales_l[i] = static_cast<uint8_t>(v * 13 + 71 * i);
    const uint64_t ls = iq4_xs_scales8(b);
    for (int s = 0; s < 8; ++s)
      ASSERT_EQ((ls >> (8 * s)) & 0xFF, static_cast<uint64_t>(iq4_xs_scale(b, s))) << v << " " << s;
  }
}

}  // namespace
}  // namespace sluice
