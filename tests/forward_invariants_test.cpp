// Invariants of the forward pass: decoding token by token gives the same logits
// as one prefill over the same tokens (within 1e-5), for the real model and for
// synthetic models in every weight type.
#include <cstring>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_features.h"
#include "base/test_data.h"
#include "model/model.h"
#include "model/synth.h"

namespace sluice {
namespace {

void expect_decode_equals_prefill(const std::shared_ptr<const ModelFile>& file, int64_t n_tokens, int n_batch) {
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = n_batch});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  const int64_t n_vocab = model.hparams().n_vocab;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 1) % n_vocab);

  std::vector<float> prefill(static_cast<size_t>(n_tokens * n_vocab));
  KvCache kv1 = model.make_kv_cache(n_tokens);
  ASSERT_TRUE(model.forward(tokens, kv1, prefill.data(), true).ok());

  std::vector<float> step(static_cast<size_t>(n_vocab));
  KvCache kv2 = model.make_kv_cache(n_tokens);
  double max_err = 0;
  for (int64_t i = 0; i < n_tokens; ++i) {
    ASSERT_TRUE(model.forward(std::span(tokens.data() + i, 1), kv2, step.data(), false).ok());
    for (int64_t v = 0; v < n_vocab; ++v)
      max_err = std::max(max_err, static_cast<double>(std::abs(step[v] - prefill[i * n_vocab + v])));
  }
  EXPECT_LT(max_err, 1e-5);
}

TEST(ForwardInvariants, DecodeEqualsPrefillStories260K) {
  const std::string path = testing::shipped_model_path("stories260K.gguf");
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  expect_decode_equals_prefill(std::make_shared<const ModelFile>(std::move(*mf)), 40, 16);
}

class SynthInvariants : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthInvariants, DecodeEqualsPrefill) {
  SynthShape shape{.name = "mini", .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_head = 4,
                   .n_head_kv = 2, .n_ff = 512, .n_ctx = 128};
  const std::string path = ::testing::TempDir() + "/synth_mini_" + GetParam() + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = GetParam(), .seed = 7, .n_threads = 2}, path);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  expect_decode_equals_prefill(std::make_shared<const ModelFile>(std::move(*mf)), 24, 8);
}

INSTANTIATE_TEST_SUITE_P(Types, SynthInvariants,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m", "q4_1",
                                           "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k_m", "q5_k_s", "iq4_xs"));

// Q4_0 and Q8_0 matrices repacked at load (backend/cpu/repack.h) give the same
// logits, bit for bit, as the same model on GGUF rows, for a prefill and for
// decode steps.
class RepackInvariants : public ::testing::TestWithParam<std::string> {};

TEST_P(RepackInvariants, RepackedWeightsGiveIdenticalLogits) {
  SynthShape shape{.name = "mini", .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_head = 4,
                   .n_head_kv = 2, .n_ff = 512, .n_ctx = 128};
  const std::string path = ::testing::TempDir() + "/synth_mini_repack_" + GetParam() + ".gguf";
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = GetParam(), .seed = 9, .n_threads = 2}, path).ok());
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  auto packed = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 16});
  auto plain = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 16, .repack = false});
  ASSERT_TRUE(packed.ok() && plain.ok());
  EXPECT_EQ((*plain)->repacked_bytes(), 0u);
  if (cpu::active_isa() != cpu::Isa::kScalar) {
    EXPECT_GT((*packed)->repacked_bytes(), 0u);
    EXPECT_NE((*packed)->repack_summary().find("repacked"), std::string::npos);
  }
  const int64_t n_vocab = (*plain)->hparams().n_vocab;
  std::vector<int32_t> tokens(20);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 3) % n_vocab);
  std::vector<float> a(12 * n_vocab), b(12 * n_vocab);
  KvCache ka = (*packed)->make_kv_cache(32), kb = (*plain)->make_kv_cache(32);
  ASSERT_TRUE((*packed)->forward(std::span(tokens.data(), 12), ka, a.data(), true).ok());
  ASSERT_TRUE((*plain)->forward(std::span(tokens.data(), 12), kb, b.data(), true).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  for (size_t i = 12; i < tokens.size(); ++i) {
    ASSERT_TRUE((*packed)->forward(std::span(tokens.data() + i, 1), ka, a.data(), false).ok());
    ASSERT_TRUE((*plain)->forward(std::span(tokens.data() + i, 1), kb, b.data(), false).ok());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), n_vocab * 4), 0) << "decode step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, RepackInvariants, ::testing::Values("q4_0", "q8_0"));

TEST(ForwardErrors, RejectsOutOfRangeTokensAndFullContext) {
  const std::string path = testing::shipped_model_path("stories260K.gguf");
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)), ModelOptions{.n_threads = 1});
  ASSERT_TRUE(m.ok());
  std::vector<float> logits(512);
  KvCache kv = (*m)->make_kv_cache(2);
  const int32_t bad[1] = {512};
  EXPECT_EQ((*m)->forward(bad, kv, logits.data(), false).code(), StatusCode::kInvalidArgument);
  const int32_t three[3] = {1, 2, 3};
  EXPECT_EQ((*m)->forward(three, kv, logits.data(), false).code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sluice
