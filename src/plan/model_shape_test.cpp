// Shapes from presets, GGUF metadata and HF config.json; parameter and byte
// counts against the engine's own accounting of a real (synthetic) file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "format/model_file.h"
#include "model/model.h"
#include "model/synth.h"
#include "plan/weight_bytes.h"

namespace sluice::plan {
namespace {

std::string billions(int64_t n) { return fmt::format("{:.2f}", static_cast<double>(n) / 1e9); }

TEST(ModelShape, PresetParameterCounts) {
  // Published sizes: Llama 2 7B 6.74B, 13B 13.02B, 70B 68.98B; Llama 3 8B 8.03B,
  // 70B 70.55B; Llama 3.1 405B 405.85B.
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-7b").value()).total()), "6.74");
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-13b").value()).total()), "13.02");
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-70b").value()).total()), "68.98");
  EXPECT_EQ(billions(count_params(preset_shape("llama-3-8b").value()).total()), "8.03");
  EXPECT_EQ(billions(count_params(preset_shape("llama-3-70b").value()).total()), "70.55");
  EXPECT_EQ(billions(count_params(preset_shape("405b").value()).total()), "405.85");
}

TEST(ModelShape, MoePresetActiveVersusTotal) {
  const ParamCount p = count_params(preset_shape("glm-4.7").value());
  // ~355B total and ~32B active on the model card (which also counts a
  // multi-token-prediction block this shape leaves out).
  EXPECT_GT(p.total(), 340'000'000'000);
  EXPECT_LT(p.total(), 360'000'000'000);
  EXPECT_GT(p.active(), 30'000'000'000);
  EXPECT_LT(p.active(), 36'000'000'000);
  EXPECT_EQ(p.experts_active * 20, p.experts);  // 8 of 160
}

TEST(ModelShape, UnknownPresetIsNotFound) {
  const auto s = preset_shape("llama-9");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("llama-3-70b"), std::string::npos);
}

TEST(ModelShape, ValidateRefusesBadShapes) {
  ModelShape s = preset_shape("llama-3-8b").value();
  s.n_head_kv = 5;
  EXPECT_FALSE(validate_shape(s).ok());
  s = preset_shape("glm-4.7").value();
  s.n_expert_used = 0;
  EXPECT_FALSE(validate_shape(s).ok());
}

TEST(ModelShape, FromHfConfig) {
  const std::string llama = R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "max_position_embeddings": 8192})";
  const ModelShape s = shape_from_hf_config(llama, "config.json").value();
  EXPECT_EQ(count_params(s).total(), count_params(preset_shape("llama-3-8b").value()).total());
  const std::string mixtral = R"({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})";
  const ParamCount m = count_params(shape_from_hf_config(mixtral, "config.json").value());
  EXPECT_EQ(billions(m.total()), "46.70");   // Mixtral 8x7B: 46.7B total
  EXPECT_EQ(billions(m.active()), "12.88");  // 12.9B active
  EXPECT_FALSE(shape_from_hf_config("{\"hidden_size\": 1}", "config.json").ok());
  EXPECT_FALSE(shape_from_hf_config("not json", "config.json").ok());
}

TEST(WeightFormat, BlockOverheadCounts) {
  EXPECT_DOUBLE_EQ(parse_weight_format("q8_0")->bits_per_weight(), 8.5);
  EXPECT_DOUBLE_EQ(parse_weight_format("Q4_K")->bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(parse_weight_format("q6_k")->bits_per_weight(), 6.5625);
  EXPECT_DOUBLE_EQ(parse_weight_format("bits:4.8")->bits_per_weight(), 4.8);
  EXPECT_EQ(parse_weight_format("q8_0")->bytes(33), 68u);  // two blocks
  EXPECT_FALSE(parse_weight_format("q3_xs").ok());
  EXPECT_FALSE(parse_weight_format("bits:0").ok());
  EXPECT_FALSE(parse_weight_format("bits:4.8x").ok());
}

TEST(WeightBytes, MoeExpertsTouchedGrowWithBatch) {
  const WeightBytes w = weight_bytes(preset_shape("glm-4.7").value(), uniform_mix(parse_weight_format("q4_k").value()));
  EXPECT_DOUBLE_EQ(w.experts_touched(1), 8.0);
  EXPECT_GT(w.experts_touched(16), 8.0 * 10);
  EXPECT_LT(w.experts_touched(16), 160.0);
  EXPECT_LT(w.matrix_read_bytes(1), w.matrix_read_bytes(16));
}

// A tiny synthetic GGUF in a temporary file, removed at the end.
class SynthFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fmt::format("/tmp/sluice-plan-test-{}-{}.gguf", ::getpid(), ::testing::UnitTest::GetInstance()->random_seed());
    SynthOptions o{.shape = synth_preset("tiny").value(), .type = "q8_0", .seed = 3, .n_threads = 1};
    ASSERT_TRUE(write_synth_model(o, path_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(SynthFile, GgufShapeAndBytesMatchTheEngine) {
  auto mf = open_model_file(path_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  const ModelShape s = shape_from_metadata(file->metadata).value();
  EXPECT_EQ(s.n_embd, 256);
  EXPECT_EQ(s.n_layer, 4);
  EXPECT_EQ(s.n_head_kv, 4);
  // The planner's bytes of a uniform Q8_0 model equal the file's tensor bytes...
  const WeightBytes planned = weight_bytes(s, uniform_mix(parse_weight_format("q8_0").value()));
  const WeightBytes exact = weight_bytes_of_file(*file, s);
  EXPECT_EQ(planned.total(), file->total_tensor_bytes());
  EXPECT_EQ(exact.total(), file->total_tensor_bytes());
  for (int c = 0; c < kNumTensorClasses; ++c) EXPECT_EQ(planned.stored[c], exact.stored[c]) << c;
  // ...and the bytes one decode token reads equal the engine's own count.
  auto model = Model::load(file, {.n_threads = 1, .n_batch = 8});
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(exact.matrix_read_bytes(1), static_cast<double>((*model)->weight_bytes()));
}

}  // namespace
}  // namespace sluice::plan
