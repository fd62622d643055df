// Golden tests of a real trained mixture-of-experts model: stories-moe (Mixtral
// style, 16 experts, top-2) from GGUF and from its HF folder, on the CPU and on
// the reference backend, against an independent PyTorch forward pass: greedy
// ids exactly, logits within 1e-4, and the router's top-2 at every position of
// every layer.
#include <algorithm>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "golden_params.h"
#include "model/generate.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace sluice {
namespace {

using testing::model_path;

// "gguf" / "hf" on the CPU backend, "gguf@BACKEND" on every other one.
class MoeGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_EXISTS(model_path("stories-moe/reference.json"));
    std::ifstream in(model_path("stories-moe/reference.json"));
    ref_ = nlohmann::json::parse(in);
    const testing::GoldenParam param = testing::parse_golden_param(GetParam());
    if (!param.skip.empty()) GTEST_SKIP() << param.skip;
    auto mf = open_model_file(model_path(param.format == "hf" ? "stories-moe/hf" : "stories-moe/stories-moe.gguf"));
    ASSERT_TRUE(mf.ok()) << mf.status().to_string();
    auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                         ModelOptions{.n_threads = 2, .n_batch = 64, .backend = param.backend});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  nlohmann::json ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(MoeGoldenTest, GreedyIdsMatchReference) {
  ASSERT_EQ(model_->hparams().n_expert, 16);
  for (const auto& c : ref_["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto expected = c["greedy_ids"].get<std::vector<int32_t>>();
    Sampler greedy(SamplingParams{.temperature = 0.0f}, static_cast<int32_t>(model_->hparams().n_vocab));
    KvCache kv = model_->make_kv_cache(static_cast<int64_t>(prompt.size() + expected.size()));
    auto r = generate(*model_, kv, prompt, greedy,
                      GenerateParams{.stop = {.max_tokens = static_cast<int64_t>(expected.size())}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->tokens, expected) << c["prompt"];
  }
}

TEST_P(MoeGoldenTest, LogitsAndRoutingMatchReference) {
  const int64_t n_vocab = model_->hparams().n_vocab;
  const int64_t n_layer = model_->hparams().n_layer;
  for (const auto& c : ref_["cases"]) {
    std::vector<int32_t> all = c["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : c["greedy_ids"].get<std::vector<int32_t>>()) all.push_back(t);
    const auto n = static_cast<int64_t>(all.size());
    // The router's choices per (layer, position), from the activation hook.
    std::vector<std::vector<std::vector<int32_t>>> chosen(static_cast<size_t>(n_layer));
    model_->set_activation_hook([&](std::string_view name, int64_t layer, const float* data, int64_t n_tok, int64_t k) {
      if (name != "ffn_moe_ids") return;
      for (int64_t t = 0; t < n_tok; ++t) {
        std::vector<int32_t> ids;
        for (int64_t j = 0; j < k; ++j) ids.push_back(static_cast<int32_t>(data[t * k + j]));
        std::sort(ids.begin(), ids.end());
        chosen[static_cast<size_t>(layer)].push_back(ids);
      }
    });
    std::vector<float> logits(static_cast<size_t>(n * n_vocab));
    KvCache kv = model_->make_kv_cache(n);
    ASSERT_TRUE(model_->forward(all, kv, logits.data(), true).ok());
    model_->set_activation_hook({});
    double max_err = 0;
    for (int64_t p = 0; p < 4; ++p)
      for (int64_t v = 0; v < n_vocab; ++v)
        max_err = std::max(max_err, std::abs(logits[static_cast<size_t>(p * n_vocab + v)] -
                                              c["logits_first4"][p][v].get<double>()));
    for (int64_t v = 0; v < n_vocab; ++v)
      max_err = std::max(max_err, std::abs(logits[static_cast<size_t>((n - 1) * n_vocab + v)] -
                                            c["logits_last"][v].get<double>()));
    EXPECT_LT(max_err, 1e-4) << c["prompt"];
    const auto& topk = c["router_topk"];
    ASSERT_EQ(static_cast<int64_t>(topk.size()), n);
    int64_t mismatches = 0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t l = 0; l < n_layer; ++l)
        mismatches += chosen[static_cast<size_t>(l)][static_cast<size_t>(p)] != topk[p][l].get<std::vector<int32_t>>();
    EXPECT_EQ(mismatches, 0) << c["prompt"];
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MoeGoldenTest, ::testing::ValuesIn(testing::golden_params({"gguf", "hf"})),
                         testing::golden_param_name);

}  // namespace
}  // namespace sluice
