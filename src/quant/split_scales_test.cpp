// The split-scales layout: where each byte of a GGUF Q4_0 / Q8_0 matrix goes,
// written out by hand, and the round trip back to rows.
#include "quant/split_scales.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "quant/quant.h"

namespace sluice {
namespace {

TEST(SplitScales, TakesQ4_0AndQ8_0OfWholeBlocks) {
  EXPECT_TRUE(split_scales_takes(DType::kQ4_0, 64));
  EXPECT_TRUE(split_scales_takes(DType::kQ8_0, 32));
  EXPECT_FALSE(split_scales_takes(DType::kQ4_0, 48));
  EXPECT_FALSE(split_scales_takes(DType::kQ4_K, 256));
  EXPECT_FALSE(split_scales_takes(DType::kF16, 64));
  EXPECT_EQ(split_quant_bytes(DType::kQ4_0), 16);
  EXPECT_EQ(split_quant_bytes(DType::kQ8_0), 32);
}

// 2 rows of 64: blocks (r0 b0) (r0 b1) (r1 b0) (r1 b1), each byte numbered by
// its block k and its place j: scale bytes 0xA0+k, 0xB0+k; quant j = 16k + j.
TEST(SplitScales, Q4_0BytesLandWhereTheLayoutSays) {
  const DType t = DType::kQ4_0;
  const int64_t n_out = 2, n_in = 64, n_blocks = 4;
  std::vector<uint8_t> rows;
  for (int k = 0; k < n_blocks; ++k) {
    rows.push_back(static_cast<uint8_t>(0xA0 + k));
    rows.push_back(static_cast<uint8_t>(0xB0 + k));
    for (int j = 0; j < 16; ++j) rows.push_back(static_cast<uint8_t>(16 * k + j));
  }
  ASSERT_EQ(rows.size(), row_bytes(t, n_in) * n_out);
  std::vector<uint8_t> split(rows.size(), 0xEE);
  split_scales(t, rows.data(), n_out, n_in, split.data());
  for (int k = 0; k < n_blocks; ++k) {
    for (int j = 0; j < 16; ++j) EXPECT_EQ(split[16 * k + j], 16 * k + j) << k << " " << j;
    EXPECT_EQ(split[16 * n_blocks + 2 * k], 0xA0 + k);
    EXPECT_EQ(split[16 * n_blocks + 2 * k + 1], 0xB0 + k);
  }
  std::vector<uint8_t> back(rows.size(), 0xEE);
  join_scales(t, split.data(), n_out, n_in, back.data());
  EXPECT_EQ(back, rows);
}

TEST(SplitScales, QuantizedMatricesRoundTripAndKeepTheirValues) {
  for (DType t : {DType::kQ4_0, DType::kQ8_0}) {
    const int64_t n_out = 5, n_in = 96;
    std::vector<float> x(static_cast<size_t>(n_out * n_in));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    const size_t rb = row_bytes(t, n_in);
    std::vector<uint8_t> rows(rb * n_out), split(rb * n_out), back(rb * n_out);
    for (int64_t r = 0; r < n_out; ++r) quantize_row(t, x.data() + r * n_in, rows.data() + r * rb, n_in);
    split_scales(t, rows.data(), n_out, n_in, split.data());
    EXPECT_NE(split, rows);
    // Block b of row r: quants at (r * n_b + b) * qb, its scale after all quants.
    const int64_t qb = split_quant_bytes(t), n_b = n_in / 32;
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t b = 0; b < n_b; ++b) {
        const uint8_t* blk = rows.data() + r * rb + b * (qb + 2);
        const int64_t i = r * n_b + b;
        EXPECT_EQ(std::memcmp(split.data() + i * qb, blk + 2, qb), 0);
        EXPECT_EQ(std::memcmp(split.data() + n_out * n_b * qb + 2 * i, blk, 2), 0);
      }
    join_scales(t, split.data(), n_out, n_in, back.data());
    EXPECT_EQ(back, rows) << dtype_name(t);
  }
}

}  // namespace
}  // namespace sluice
