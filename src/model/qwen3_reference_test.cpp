// Qwen3 and Qwen3-MoE against an independent implementation: a PyTorch
// forward pass written from the Hugging Face modeling code
// (tests/ref/qwen3_reference.py), run in float64 on two tiny random-weight HF
// folders the script wrote (tests/data/qwen3_hf/{qwen3,qwen3moe}: config.json,
// model.safetensors in f32, a tokenizer). Sluice loads the folders as a user
// would (open_model_file on the folder) and must give the same logits at
// every prompt position, on the reference and the CPU backends, and the same
// greedy continuation.
//
// Tolerance: sluice computes in f32. The script measures how far PyTorch's
// own f32 forward strays from its f64 one (f32_max_abs_diff: 2.4e-6 and
// 1.8e-6 for logits up to 4): that is the size f32 rounding has here.
// Sluice's kernels sum in other orders and use a polynomial exp, which moves
// the result by the same order (measured: 1.2e-6 to 2.3e-6 on both
// backends). 2e-5 is about ten times the f32 rounding and far below what any
// wrong term would cost; the greedy paths' smallest top-1 margins
// (greedy_min_margin, >= 0.013) and the MoE's smallest gap between the k-th
// and next routing probability (router_min_gap, 2e-3) are far larger, so ids
// and routing must agree exactly.
#include <algorithm>
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "base/test_data.h"
#include "model/greedy_test_util.h"
#include "model/model.h"

namespace sluice {
namespace {

constexpr double kLogitTolerance = 2e-5;

nlohmann::json reference() {
  std::ifstream in(testing::source_dir() + "/tests/data/qwen3_reference.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

class Qwen3Reference : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen3Reference, HfFolderLogitsAndGreedyMatchThePyTorchForward) {
  const nlohmann::json ref = reference();
  ASSERT_FALSE(ref.is_discarded()) << "tests/data/qwen3_reference.json is missing or malformed";
  const nlohmann::json& want = ref["models"][GetParam()];
  const std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  const std::string folder = testing::source_dir() + "/tests/data/" + want["folder"].get<std::string>();
  // The fixture's own evidence for the tolerance.
  ASSERT_LT(want["f32_max_abs_diff"].get<double>(), kLogitTolerance / 5);
  ASSERT_GT(want["greedy_min_margin"].get<double>(), 10 * kLogitTolerance);

  auto mf = open_model_file(folder);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  for (const char* be : {"reference", "cpu"}) {
    SCOPED_TRACE(be);
    auto m = Model::load(file, ModelOptions{.n_batch = 32, .backend = create_backend({.name = be, .n_threads = 2}).value()});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->hparams().spec->name, std::string(GetParam()));
    const int64_t n_vocab = (*m)->hparams().n_vocab;
    ASSERT_EQ(n_vocab, 512);
    KvCache kv = (*m)->make_kv_cache(64, KvDtype::kF32).value();
    std::vector<float> lg(prompt.size() * static_cast<size_t>(n_vocab));
    ASSERT_TRUE((*m)->forward(prompt, kv, lg.data(), /*all_logits=*/true).ok());
    double max_err = 0;
    for (size_t p = 0; p < prompt.size(); ++p)
      for (int64_t v = 0; v < n_vocab; ++v)
        max_err = std::max(max_err, std::abs(want["logits"][p][static_cast<size_t>(v)].get<double>() -
                                             static_cast<double>(lg[p * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)])));
    EXPECT_LT(max_err, kLogitTolerance) << GetParam() << ": largest logit difference";
    std::printf("%s on %s: largest logit difference %.3g\n", GetParam(), be, max_err);
    const std::vector<int32_t> greedy = testing_util::greedy_continuation(
        **m, kv, lg.data() + (prompt.size() - 1) * static_cast<size_t>(n_vocab), n_vocab, want["greedy"].size());
    EXPECT_EQ(greedy, want["greedy"].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, Qwen3Reference, ::testing::Values("qwen3", "qwen3moe"));

}  // namespace
}  // namespace sluice
