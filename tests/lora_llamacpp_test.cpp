// An adapter written by `sluice finetune` (tests/data/lora_llamacpp/, see
// SOURCES.md there) loads in llama.cpp, and sluice's logits with it are
// llama.cpp's: stories260K + that adapter at scale 1.0, an f32 KV cache, on
// the CPU and reference backends, within 1e-4 at the positions llama.cpp's
// logits were kept for. The base alone is far from them (the adapter is
// applied, not ignored).
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "golden_params.h"
#include "lora/lora_adapter.h"
#include "model/model.h"

namespace sluice {
namespace {

using testing::model_path;

const std::string kSharedBase = model_path("stories260K/stories260K.gguf");
const std::string kDir = std::string(SLUICE_SOURCE_DIR) + "/tests/data/lora_llamacpp";

class LoraLlamaCpp : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraLlamaCpp, ASluiceAdapterGivesLlamaCppsLogits) {
  SKIP_UNLESS_EXISTS(kSharedBase);
  std::ifstream in(kDir + "/logits.json");
  ASSERT_TRUE(in.good()) << kDir << "/logits.json";
  const nlohmann::json want = nlohmann::json::parse(in);
  const testing::GoldenParam param = testing::parse_golden_param("gguf@" + GetParam());
  if (!param.skip.empty()) GTEST_SKIP() << param.skip;

  auto mf = open_model_file(kSharedBase);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                       ModelOptions{.n_threads = 2, .backend = param.backend});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto ad = read_lora(kDir + "/" + want["adapter"].get<std::string>());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  auto index = (*m)->add_lora(*ad, want["scale"].get<float>());
  ASSERT_TRUE(index.ok()) << index.status().to_string();

  const auto ids = want["ids"].get<std::vector<int32_t>>();
  const auto positions = want["positions"].get<std::vector<int64_t>>();
  const nlohmann::json& rows = want["logits"];
  ASSERT_EQ(rows.size(), positions.size());
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  auto error = [&](LoraMask loras) {
    KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(ids.size()), KvDtype::kF32).value();
    std::vector<float> logits(ids.size() * static_cast<size_t>(n_vocab));
    EXPECT_TRUE((*m)->forward(ids, kv, logits.data(), /*all_logits=*/true, loras).ok());
    double err = 0;
    for (size_t r = 0; r < positions.size(); ++r) {
      EXPECT_EQ(rows[r].size(), static_cast<size_t>(n_vocab));
      const float* got = logits.data() + positions[r] * n_vocab;
      for (int64_t v = 0; v < n_vocab; ++v) err = std::max(err, std::abs(got[v] - rows[r][v].get<double>()));
    }
    return err;
  };
  const double with = error(1);
  ::testing::Test::RecordProperty("max_abs_err", std::to_string(with));
  EXPECT_LT(with, 1e-4);
  EXPECT_GT(error(0), 0.1);  // the base alone
}

INSTANTIATE_TEST_SUITE_P(Backends, LoraLlamaCpp, ::testing::Values("cpu", "reference"));

}  // namespace
}  // namespace sluice
