// Weight-type names and llama.cpp's mix rules (quant_mix.h). The rules that
// apply at the tiny shape are also checked against llama-quantize's own files
// in tests/quant_zoo_test.cpp; these cover the rest (larger models, grouped
// queries, tied output, rows that do not split into super-blocks).
#include "quant/quant_mix.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

DType type_for(const std::string& mix, const std::string& name, int64_t n_layer = 32, int64_t n_gqa = 1,
               int64_t ne0 = 4096, bool has_output = true) {
  auto m = quant_mix_from_name(mix);
  EXPECT_TRUE(m.ok()) << mix;
  DType t = DType::kF32;
  EXPECT_TRUE(quant_mix_type(*m, MixTensor{.name = name, .ne0 = ne0, .n_layer = n_layer, .n_gqa = n_gqa,
                                           .has_output = has_output},
                             &t))
      << mix << " " << name;
  return t;
}

TEST(QuantMix, NamesParseCaseInsensitivelyAndUnknownOnesAreListed) {
  auto m = quant_mix_from_name("Q4_K_M");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->is_mix);
  EXPECT_EQ(m->base, DType::kQ4_K);
  EXPECT_EQ(m->file_type, 15);
  auto plain = quant_mix_from_name("q5_1");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->is_mix);
  EXPECT_EQ(plain->base, DType::kQ5_1);
  auto bad = quant_mix_from_name("q7_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q7_k"), std::string::npos);
  EXPECT_NE(bad.status().message().find("iq4_xs"), std::string::npos);  // the accepted names are listed
}

TEST(QuantMix, PlainTypesGiveEveryMatrixTheType) {
  EXPECT_EQ(type_for("q5_0", "output.weight"), DType::kQ5_0);
  EXPECT_EQ(type_for("q5_0", "blk.3.attn_v.weight"), DType::kQ5_0);
  DType t = DType::kF32;
  auto m = quant_mix_from_name("q5_k");
  EXPECT_FALSE(quant_mix_type(*m, MixTensor{.name = "blk.0.ffn_down.weight", .ne0 = 96}, &t));  // 96 % 256
  EXPECT_EQ(t, DType::kF32);  // untouched
}

TEST(QuantMix, MostlyMediumMixesPromoteAttnVAndFfnDownInSomeLayers) {
  // 32 layers: more_bits = first 4, last 4, and every third between.
  for (int64_t l : {0, 3, 6, 9, 28, 31}) EXPECT_EQ(type_for("q4_k_m", "blk." + std::to_string(l) + ".attn_v.weight"), DType::kQ6_K) << l;
  for (int64_t l : {4, 5, 7, 8, 26}) EXPECT_EQ(type_for("q4_k_m", "blk." + std::to_string(l) + ".ffn_down.weight"), DType::kQ4_K) << l;
  EXPECT_EQ(type_for("q5_k_m", "blk.9.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(type_for("q4_k_m", "blk.9.attn_q.weight"), DType::kQ4_K);
  EXPECT_EQ(type_for("q4_k_m", "output.weight"), DType::kQ6_K);
  EXPECT_EQ(type_for("q4_k_m", "token_embd.weight"), DType::kQ4_K);
  EXPECT_EQ(type_for("q4_k_m", "token_embd.weight", 32, 1, 4096, /*has_output=*/false), DType::kQ6_K);
}

TEST(QuantMix, LowBitMixesAndGroupedQueries) {
  EXPECT_EQ(type_for("q2_k", "blk.0.attn_v.weight", 32, 1), DType::kQ3_K);
  EXPECT_EQ(type_for("q2_k", "blk.0.attn_v.weight", 32, 4), DType::kQ4_K);
  EXPECT_EQ(type_for("q2_k", "blk.5.ffn_gate.weight"), DType::kQ2_K);
  EXPECT_EQ(type_for("q3_k_m", "blk.1.ffn_down.weight", 32), DType::kQ5_K);  // 1 < 32 / 16
  EXPECT_EQ(type_for("q3_k_m", "blk.2.ffn_down.weight", 32), DType::kQ4_K);
  EXPECT_EQ(type_for("q3_k_m", "blk.1.attn_v.weight"), DType::kQ5_K);
  EXPECT_EQ(type_for("q3_k_m", "blk.2.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(type_for("q3_k_l", "blk.2.attn_output.weight"), DType::kQ5_K);
  EXPECT_EQ(type_for("q4_k_s", "blk.3.ffn_down.weight", 32), DType::kQ5_K);  // 3 < 32 / 8
  EXPECT_EQ(type_for("q4_k_s", "blk.4.ffn_down.weight", 32), DType::kQ4_K);
  EXPECT_EQ(type_for("iq4_xs", "blk.4.attn_v.weight", 32, 4), DType::kQ5_K);
  EXPECT_EQ(type_for("iq4_xs", "blk.4.attn_v.weight", 32, 2), DType::kIQ4_XS);
}

TEST(QuantMix, RowsThatDoNotSplitIntoSuperBlocksFallBack) {
  EXPECT_EQ(type_for("q4_k_m", "blk.0.attn_q.weight", 32, 1, 4096 + 32), DType::kQ5_0);
  EXPECT_EQ(type_for("q4_k_m", "blk.0.attn_v.weight", 32, 1, 4096 + 32), DType::kQ8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(type_for("q5_k_s", "blk.0.attn_q.weight", 32, 1, 4096 + 32), DType::kQ5_1);
  EXPECT_EQ(type_for("q3_k_s", "blk.0.attn_q.weight", 32, 1, 4096 + 32), DType::kIQ4_NL);
  EXPECT_EQ(type_for("iq4_xs", "output.weight", 32, 1, 4096 + 32), DType::kQ8_0);
}

}  // namespace
}  // namespace sluice
