// Golden tests: the real stories260K model in all three formats reproduces the
// reference greedy tokens exactly and the reference logits within 1e-4.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/reference_backend.h"
#include "base/test_data.h"
#include "golden_params.h"
#include "format/gguf_reader.h"
#include "format/gguf_writer.h"
#include "format/llama2c.h"
#include "model/generate.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using testing::model_path;
using testing::shipped_model_path;
using testing::stories260k_reference_path;

nlohmann::json load_reference() {
  std::ifstream in(stories260k_reference_path());
  return nlohmann::json::parse(in);
}

std::shared_ptr<const ModelFile> open_format(const std::string& format) {
  if (format == "gguf") {
    auto mf = open_model_file(shipped_model_path("stories260K.gguf"));
    EXPECT_TRUE(mf.ok()) << mf.status().to_string();
    return std::make_shared<const ModelFile>(std::move(*mf));
  }
  if (format == "hf") {
    auto mf = open_model_file(model_path("stories260K/hf"));
    EXPECT_TRUE(mf.ok()) << mf.status().to_string();
    return std::make_shared<const ModelFile>(std::move(*mf));
  }
  // llama2.c checkpoint -> GGUF (as `sluice convert` does) -> read back.
  auto imported = import_llama2c(model_path("stories260K/stories260K.bin"), model_path("stories260K/tok512.bin"));
  EXPECT_TRUE(imported.ok()) << imported.status().to_string();
  // One file per process: ctest runs this test's backends in parallel.
  const std::string out =
      ::testing::TempDir() + "/stories260K_from_llama2c_" + std::to_string(::getpid()) + ".gguf";
  Status st = write_gguf(*imported, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  auto mf = read_gguf(out);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  std::remove(out.c_str());  // the mapping outlives the name
  return std::make_shared<const ModelFile>(std::move(*mf));
}

// Format, and the backend the model runs on: "gguf" etc. on the CPU backend,
// "gguf@reference", "gguf@cuda", ... on every other registered backend (each
// implementation of the seam reproduces the reference too; one that cannot
// run here skips with the reason).
class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ref_ = load_reference();
    const testing::GoldenParam param = testing::parse_golden_param(GetParam());
    if (!param.skip.empty()) GTEST_SKIP() << param.skip;
    // The GGUF and its reference are shipped; the HF and llama2.c copies are in ../shared.
    if (param.format == "hf") SKIP_UNLESS_EXISTS(model_path("stories260K/hf"));
    if (param.format == "llama2c") SKIP_UNLESS_EXISTS(model_path("stories260K/stories260K.bin"));
    file_ = open_format(param.format);
    ASSERT_TRUE(file_);
    auto m = Model::load(file_, ModelOptions{.n_threads = 2, .backend = param.backend});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto tok = Tokenizer::from_metadata(file_->metadata);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    tok_ = std::move(*tok);
  }
  nlohmann::json ref_;
  std::shared_ptr<const ModelFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(GoldenTest, GreedyTokensMatchReference) {
  for (const auto& g : ref_["generation"]) {
    const std::vector<int32_t> prompt = g["prompt_tokens"].get<std::vector<int32_t>>();
    const std::vector<int32_t> all = g["tokens"].get<std::vector<int32_t>>();
    // The prompt tokenizes to the reference prompt ids.
    EXPECT_EQ(tok_->encode(g["prompt"].get<std::string>(), true), prompt) << g["prompt"];
    const std::vector<int32_t> expected(all.begin() + static_cast<long>(prompt.size()), all.end());
    Sampler greedy(SamplingParams{.temperature = 0.0f}, static_cast<int32_t>(model_->hparams().n_vocab));
    KvCache kv = model_->make_kv_cache(static_cast<int64_t>(all.size()));
    auto r = generate(*model_, kv, prompt, greedy,
                      GenerateParams{.stop = {.max_tokens = static_cast<int64_t>(expected.size())}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->tokens, expected) << "prompt: " << g["prompt"];
  }
}

TEST_P(GoldenTest, LogitsMatchReference) {
  for (const auto& g : ref_["generation"]) {
    const std::vector<int32_t> all = g["tokens"].get<std::vector<int32_t>>();
    const auto& ref_logits = g["logits_first_positions"];
    const int64_t n_pos = static_cast<int64_t>(ref_logits.size());
    const int64_t n_vocab = model_->hparams().n_vocab;
    std::vector<float> logits(static_cast<size_t>(n_pos * n_vocab));
    KvCache kv = model_->make_kv_cache(n_pos);
    ASSERT_TRUE(model_->forward(std::span(all.data(), static_cast<size_t>(n_pos)), kv, logits.data(), true).ok());
    double max_err = 0;
    for (int64_t p = 0; p < n_pos; ++p) {
      ASSERT_EQ(static_cast<int64_t>(ref_logits[p].size()), n_vocab);
      for (int64_t v = 0; v < n_vocab; ++v) {
        max_err = std::max(max_err, std::abs(static_cast<double>(logits[p * n_vocab + v]) - ref_logits[p][v].get<double>()));
      }
    }
    EXPECT_LT(max_err, 1e-4) << "prompt: " << g["prompt"];
  }
}

TEST_P(GoldenTest, TextMatchesReference) {
  const auto& g = ref_["generation"][0];
  const std::vector<int32_t> all = g["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok_->decode(all), g["generated_text"].get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Formats, GoldenTest, ::testing::ValuesIn(testing::golden_params({"gguf", "hf", "llama2c"})),
                         testing::golden_param_name);

}  // namespace
}  // namespace sluice
