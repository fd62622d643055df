// Hand-built blocks of every format: the bytes are written out from the layout
// description (not from the quantizers), then dequantize_row must produce exactly
// the floats the format defines.
#include "quant/blocks.h"
#include "quant/blocks_more.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <vector>

#include "quant/quant.h"

namespace sluice {
namespace {

// Little-endian bytes of a 16-bit value.
void put_u16(std::vector<uint8_t>& bytes, uint16_t v) {
  bytes.push_back(static_cast<uint8_t>(v & 0xff));
  bytes.push_back(static_cast<uint8_t>(v >> 8));
}

// One 256-element super-block of type t dequantized: every element is
// expected(e). Returns the floats (for the spot checks that name a case).
std::vector<float> dequantize_block_expecting(DType t, const std::vector<uint8_t>& bytes,
                                              const std::function<float(int)>& expected) {
  std::vector<float> out(256);
  dequantize_row(t, bytes.data(), out.data(), 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[static_cast<size_t>(e)], expected(e)) << e;
  return out;
}

TEST(BlocksTest, FieldOffsetsMatchGgml) {
  EXPECT_EQ(offsetof(BlockQ8_0, qs), 2u);
  EXPECT_EQ(offsetof(BlockQ4_0, qs), 2u);
  EXPECT_EQ(offsetof(BlockQ4_K, d), 0u);
  EXPECT_EQ(offsetof(BlockQ4_K, dmin), 2u);
  EXPECT_EQ(offsetof(BlockQ4_K, scales), 4u);
  EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ6_K, ql), 0u);
  EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
  EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
  EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
  // quant/blocks_more.h
  EXPECT_EQ(offsetof(BlockQ4_1, qs), 4u);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), 2u);
  EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
  EXPECT_EQ(offsetof(BlockQ5_1, qh), 4u);
  EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
  EXPECT_EQ(offsetof(BlockQ2_K, qs), 16u);
  EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
  EXPECT_EQ(offsetof(BlockQ3_K, qs), 32u);
  EXPECT_EQ(offsetof(BlockQ3_K, scales), 96u);
  EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
  EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
  EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
  EXPECT_EQ(offsetof(BlockIq4Xs, scales_l), 4u);
  EXPECT_EQ(offsetof(BlockIq4Xs, qs), 8u);
  EXPECT_EQ(row_bytes(DType::kQ4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::kQ6_K, 256), 210u);
}

TEST(BlocksTest, Q8_0HandBuilt) {
  std::vector<uint8_t> bytes;
  put_u16(bytes, 0x3800);  // d = 0.5
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128)));
  ASSERT_EQ(bytes.size(), 34u);
  float out[32];
  dequantize_row(DType::kQ8_0, bytes.data(), out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(i * 8 - 128)) << i;
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[31], 60.0f);
}

TEST(BlocksTest, Q4_0HandBuiltNibbleOrder) {
  std::vector<uint8_t> bytes;
  put_u16(bytes, 0x3400);  // d = 0.25
  // Byte j: low nibble = element j, high nibble = element j + 16.
  for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  float out[32];
  dequantize_row(DType::kQ4_0, bytes.data(), out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.25f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(out[j + 16], 0.25f * static_cast<float>(7 - j)) << j;
  }
  EXPECT_EQ(out[0], -2.0f);
  EXPECT_EQ(out[16], 1.75f);
  EXPECT_EQ(out[31], -2.0f);
}

// Q4_K test block: d = 1, dmin = 0.5, these 6-bit scales/mins, quant(e) = (7e + 3) % 16.
constexpr uint8_t kSc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
constexpr uint8_t kM[8] = {0, 4, 63, 7, 20, 40, 1, 62};
// kSc / kM packed by hand (see the table in blocks.h):
//   0..3  : sc[0..3] | (sc[4..7] >> 4) << 6   = 1|1<<6, 2|2<<6, 3|3<<6, 63|0<<6
//   4..7  : m[0..3]  | (m[4..7] >> 4) << 6    = 0|1<<6, 4|2<<6, 63|0<<6, 7|3<<6
//   8..11 : (sc[4..7] & 15) | (m[4..7] & 15) << 4 = 1|4<<4, 1|8<<4, 0|1<<4, 5|14<<4
constexpr uint8_t kPacked[12] = {0x41, 0x82, 0xC3, 0x3F, 0x40, 0x84,
                                 0x3F, 0xC7, 0x41, 0x81, 0x10, 0xE5};

int q4_k_test_quant(int e) { return (7 * e + 3) % 16; }

std::vector<uint8_t> q4_k_test_block() {
  std::vector<uint8_t> bytes;
  put_u16(bytes, 0x3C00);  // d = 1
  put_u16(bytes, 0x3800);  // dmin = 0.5
  bytes.insert(bytes.end(), kPacked, kPacked + 12);
  // qs[32c + l] = quant(64c + l) | quant(64c + 32 + l) << 4
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      bytes.push_back(static_cast<uint8_t>(q4_k_test_quant(64 * c + l) |
                                           (q4_k_test_quant(64 * c + 32 + l) << 4)));
    }
  }
  return bytes;
}

TEST(BlocksTest, Q4_KScalePackingBothWays) {
  uint8_t packed[12];
  q4_k_pack_scales(kSc, kM, packed);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(packed[i], kPacked[i]) << i;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0, m = 0;
    q4_k_scale_min(kPacked, s, &sc, &m);
    EXPECT_EQ(sc, kSc[s]) << s;
    EXPECT_EQ(m, kM[s]) << s;
  }
}

TEST(BlocksTest, Q4_KScalePackingAllValues) {
  // Every 6-bit value in every sub-block position survives pack -> unpack.
  for (int v = 0; v < 64; ++v) {
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = static_cast<uint8_t>((v + 9 * s) % 64);
      m[s] = static_cast<uint8_t>((63 - v + 5 * s) % 64);
    }
    uint8_t packed[12];
    q4_k_pack_scales(sc, m, packed);
    for (int s = 0; s < 8; ++s) {
      uint8_t a = 0, b = 0;
      q4_k_scale_min(packed, s, &a, &b);
      ASSERT_EQ(a, sc[s]);
      ASSERT_EQ(b, m[s]);
    }
    uint64_t all_sc = 0, all_m = 0;  // the word-level decoder the SIMD kernels use
    q4_k_scales_mins(packed, &all_sc, &all_m);
    for (int s = 0; s < 8; ++s) {
      ASSERT_EQ((all_sc >> (8 * s)) & 0xFF, sc[s]);
      ASSERT_EQ((all_m >> (8 * s)) & 0xFF, m[s]);
    }
  }
}

TEST(BlocksTest, Q4_KHandBuilt) {
  const std::vector<uint8_t> bytes = q4_k_test_block();
  ASSERT_EQ(bytes.size(), 144u);
  const std::vector<float> out = dequantize_block_expecting(DType::kQ4_K, bytes, [](int e) {
    const int s = e / 32;
    return 1.0f * kSc[s] * q4_k_test_quant(e) - 0.5f * kM[s];
  });
  EXPECT_EQ(out[0], 3.0f);      // sub-block 0, q = 3, low nibble of qs[0]
  EXPECT_EQ(out[32], 4.0f);     // sub-block 1, q = 3, high nibble of qs[0]: 2*3 - 0.5*4
  EXPECT_EQ(out[200], 527.5f);  // sub-block 6, q = 11: 48*11 - 0.5*1
  EXPECT_EQ(out[255], 29.0f);   // sub-block 7, q = 12: 5*12 - 0.5*62
}

// Q6_K test block: d = 0.5, scales[s] = +-(s + 1), quant(e) = (5e + 1) % 64.
int q6_k_test_quant(int e) { return (5 * e + 1) % 64; }
int q6_k_test_scale(int s) { return (s & 1) ? -(s + 1) : (s + 1); }

std::vector<uint8_t> q6_k_test_block() {
  uint8_t ql[128] = {};
  uint8_t qh[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int q = q6_k_test_quant(e);
    // low 4 bits: ql[64h + l + 32 (k & 1)], low nibble for k < 2, high for k >= 2
    ql[64 * h + l + 32 * (k & 1)] |= static_cast<uint8_t>((q & 15) << (k >= 2 ? 4 : 0));
    // high 2 bits: qh[32h + l] bits 2k, 2k + 1
    qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
  }
  std::vector<uint8_t> bytes(ql, ql + 128);
  bytes.insert(bytes.end(), qh, qh + 64);
  for (int s = 0; s < 16; ++s) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(q6_k_test_scale(s))));
  put_u16(bytes, 0x3800);  // d = 0.5
  return bytes;
}

TEST(BlocksTest, Q6_KHandBuilt) {
  const std::vector<uint8_t> bytes = q6_k_test_block();
  ASSERT_EQ(bytes.size(), 210u);
  const std::vector<float> out = dequantize_block_expecting(
      DType::kQ6_K, bytes, [](int e) { return 0.5f * q6_k_test_scale(e / 16) * (q6_k_test_quant(e) - 32); });
  EXPECT_EQ(out[0], -15.5f);    // q = 1, scale 1: ql[0] low, qh[0] bits 0-1
  EXPECT_EQ(out[100], 73.5f);   // q = 53, scale 7: ql[36] high, qh[4] bits 6-7
  EXPECT_EQ(out[255], -224.0f); // q = 60, scale -16: ql[127] high, qh[63] bits 6-7
  // Spot-check raw bytes of the layout for element 100 (half 0, k = 3, l = 4).
  EXPECT_EQ(bytes[36] >> 4, 53 & 15);
  EXPECT_EQ((bytes[128 + 4] >> 6) & 3, 53 >> 4);
}

TEST(BlocksTest, Q6_KSingleBitPositions) {
  // One non-zero quant bit at a time: flipping a bit in ql/qh must change exactly
  // the element the layout assigns it to.
  for (int byte = 0; byte < 192; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bytes(210, 0);
      for (int s = 0; s < 16; ++s) bytes[192 + s] = 1;
      bytes[208] = 0x00;
      bytes[209] = 0x3C;  // d = 1
      bytes[byte] = static_cast<uint8_t>(1 << bit);
      float out[256];
      dequantize_row(DType::kQ6_K, bytes.data(), out, 256);
      int expected_e = 0, expected_q = 0;
      if (byte < 128) {
        const int h = byte / 64, r = byte % 64;
        const int k = (r >= 32 ? 1 : 0) + (bit >= 4 ? 2 : 0);
        expected_e = 128 * h + 32 * k + r % 32;
        expected_q = 1 << (bit % 4);
      } else {
        const int h = (byte - 128) / 32, l = (byte - 128) % 32;
        expected_e = 128 * h + 32 * (bit / 2) + l;
        expected_q = 16 << (bit % 2);
      }
      for (int e = 0; e < 256; ++e) {
        const float want = static_cast<float>((e == expected_e ? expected_q : 0) - 32);
        ASSERT_EQ(out[e], want) << "byte " << byte << " bit " << bit << " element " << e;
      }
    }
  }
}

TEST(BlocksTest, FloatRowsHandBuilt) {
  const uint8_t f16[] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0xFF, 0x7B};
  float out[4];
  dequantize_row(DType::kF16, f16, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 5.9604644775390625e-08f);
  EXPECT_EQ(out[3], 65504.0f);
  const uint8_t bf16[] = {0x80, 0x3F, 0x40, 0xC0, 0x49, 0x40, 0x80, 0xFF};
  dequantize_row(DType::kBF16, bf16, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 3.140625f);
  EXPECT_TRUE(std::isinf(out[3]) && out[3] < 0);
  const float f32[] = {1.5f, -0.25f};
  dequantize_row(DType::kF32, f32, out, 2);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
}

}  // namespace
}  // namespace sluice
