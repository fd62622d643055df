// The traits table (dtype.h): every row is reachable by its GGUF id and its
// name, its geometry agrees with its reference functions, and its file type and
// small-row fallback are ones the quant mixes can write.
#include "quant/dtype.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant/quant_mix.h"

namespace sluice {
namespace {

std::string lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

TEST(DTypeTraits, EveryRowIsFoundByItsIdAndName) {
  ASSERT_EQ(all_dtype_traits().size(), 15u);
  for (const DTypeTraits& t : all_dtype_traits()) {
    EXPECT_EQ(&dtype_traits(t.type), &t) << t.name;
    EXPECT_EQ(dtype_from_ggml(static_cast<uint32_t>(t.type)), t.type) << t.name;
    EXPECT_EQ(dtype_from_name(t.name), t.type) << t.name;
    EXPECT_EQ(ggml_type_name(static_cast<uint32_t>(t.type)), t.name);
    EXPECT_GT(t.block_size, 0) << t.name;
    EXPECT_GT(t.block_bytes, 0) << t.name;
  }
}

TEST(DTypeTraits, ReferenceFunctionsAgreeWithTheRowsGeometry) {
  for (const DTypeTraits& t : all_dtype_traits()) {
    const int64_t n = 2 * (t.block_size < 32 ? 32 : t.block_size);
    std::vector<float> x(static_cast<size_t>(n)), back(static_cast<size_t>(n)), ones(static_cast<size_t>(n), 1.0f);
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
    // One guard byte past the row: quantize writes exactly row_bytes.
    std::vector<uint8_t> q(row_bytes(t.type, n) + 1, 0xA5);
    t.quantize(x.data(), q.data(), n);
    EXPECT_EQ(q.back(), 0xA5) << t.name;
    t.dequantize(q.data(), back.data(), n);
    float sum = 0.0f;
    for (float v : back) sum += v;
    // The row's dot with ones is the grouped sum of its dequantized values.
    EXPECT_NEAR(t.dot(q.data(), ones.data(), n), sum, 1e-4f * n) << t.name;
    EXPECT_EQ(dot_row(t.type, q.data(), ones.data(), n), t.dot(q.data(), ones.data(), n)) << t.name;
  }
}

TEST(DTypeTraits, FileTypesAndSmallRowFallbacksAreTheMixes) {
  for (const DTypeTraits& t : all_dtype_traits()) {
    auto mix = quant_mix_from_name(lower(t.name));
    ASSERT_TRUE(mix.ok()) << t.name;
    EXPECT_EQ(mix->base, t.type) << t.name;
    EXPECT_EQ(mix->file_type, t.file_type) << t.name;
    // The fallback splits rows of any multiple of 32.
    EXPECT_EQ(32 % dtype_traits(t.small_row_fallback).block_size, 0) << t.name;
  }
  EXPECT_EQ(dtype_traits(DType::kQ4_K).small_row_fallback, DType::kQ5_0);
  EXPECT_EQ(dtype_traits(DType::kQ6_K).small_row_fallback, DType::kQ8_0);
}

}  // namespace
}  // namespace sluice
