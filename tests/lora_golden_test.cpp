// LoRA adapters at inference on the real stories260K and the reference
// fine-tune of ../shared/models/stories260K-lora (reference.json's
// conventions: llama.cpp's scale 1.0, effective alpha / rank = 2, an f32 KV
// cache):
//   - base + lora-trained.gguf gives logits_trained within 1e-4 and the
//     greedy_trained tokens, on the CPU and reference backends;
//   - sequences with different adapters (and none) in one forward pass give,
//     each, the logits they give alone, bit for bit, in prefill and decode;
//   - several adapters on one sequence add their deltas (llama.cpp's
//     --lora A --lora B).
#include <cmath>
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "format/gguf_reader.h"
#include "golden_params.h"
#include "lora/lora_adapter.h"
#include "model/generate.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "lora_paths.h"

namespace sluice {
namespace {

using testing::model_path;


std::shared_ptr<const ModelFile> open_base() {
  auto mf = open_model_file(testing::kLoraBase);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return std::make_shared<const ModelFile>(std::move(*mf));
}

LoraAdapter read(const std::string& path) {
  auto ad = read_lora(path);
  EXPECT_TRUE(ad.ok()) << ad.status().to_string();
  return ad.ok() ? std::move(*ad) : LoraAdapter{};
}

// Largest |a - b| over the reference's rows.
double max_abs_error(const std::vector<float>& got, const nlohmann::json& want, int64_t n_vocab) {
  double err = 0;
  for (size_t p = 0; p < want.size(); ++p)
    for (int64_t v = 0; v < n_vocab; ++v)
      err = std::max(err, std::abs(got[p * n_vocab + v] - want[p][v].get<double>()));
  return err;
}

// The backend the model runs on ("cpu", "reference").
class LoraGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_EXISTS(testing::kLoraReference);
    std::ifstream in(testing::kLoraReference);
    ref_ = nlohmann::json::parse(in);
    const testing::GoldenParam param = testing::parse_golden_param("gguf@" + GetParam());
    if (!param.skip.empty()) GTEST_SKIP() << param.skip;
    auto m = Model::load(open_base(), ModelOptions{.n_threads = 2, .backend = param.backend});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto index = model_->add_lora(read(testing::kLoraTrained), 1.0f);
    ASSERT_TRUE(index.ok()) << index.status().to_string();
    ASSERT_EQ(*index, 0);
  }
  nlohmann::json ref_;
  std::unique_ptr<Model> model_;
};

TEST_P(LoraGolden, LogitsMatchTheReferenceFineTune) {
  const auto& lt = ref_["logits_trained"];
  const auto ids = lt["ids"].get<std::vector<int32_t>>();
  const int64_t n_vocab = model_->hparams().n_vocab;
  const auto n = static_cast<int64_t>(ids.size());
  auto run = [&](LoraMask loras) {
    KvCache kv = model_->make_kv_cache(n, KvDtype::kF32).value();
    std::vector<float> logits(static_cast<size_t>(n * n_vocab));
    EXPECT_TRUE(model_->forward(ids, kv, logits.data(), /*all_logits=*/true, loras).ok());
    return logits;
  };
  EXPECT_LT(max_abs_error(run(1), lt["logits"], n_vocab), 1e-4);
  // Negative control: the base alone is far from the fine-tune's logits.
  EXPECT_GT(max_abs_error(run(0), lt["logits"], n_vocab), 1.0);
}

TEST_P(LoraGolden, GreedyTokensMatchTheReferenceFineTune) {
  const auto& g = ref_["greedy_trained"];
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expected(all.begin() + static_cast<long>(prompt.size()), all.end());
  Sampler greedy(SamplingParams{.temperature = 0.0f}, static_cast<int32_t>(model_->hparams().n_vocab));
  KvCache kv = model_->make_kv_cache(static_cast<int64_t>(all.size()), KvDtype::kF32).value();
  auto r = generate(*model_, kv, prompt, greedy,
                    GenerateParams{.stop = {.max_tokens = static_cast<int32_t>(expected.size())}, .loras = 1});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tokens, expected);
}

INSTANTIATE_TEST_SUITE_P(Backends, LoraGolden, ::testing::Values("cpu", "reference"));

// Sequences of different lengths, each with its own adapters.
struct SeqCase {
  std::vector<int32_t> tokens;
  LoraMask loras;
};

// Prefills the chosen sequences in one forward pass, then decodes one token
// of each in a second; returns both passes' logits (all rows), concatenated.
std::vector<float> prefill_and_decode(Model& m, const std::vector<SeqCase>& cases, const std::vector<int>& which) {
  const int64_t n_vocab = m.hparams().n_vocab;
  KvCache kv = m.make_kv_cache(320, KvDtype::kF32).value();  // 20 blocks of 16: 4 per sequence
  const std::span<const int32_t> table = kv.block_table();
  std::vector<ForwardSeq> seqs;
  size_t n = 0;
  for (int w : which) {
    const SeqCase& c = cases[static_cast<size_t>(w)];
    seqs.push_back(ForwardSeq{.tokens = c.tokens, .pos0 = 0, .block_table = table.subspan(4 * w, 4),
                              .n_logits = static_cast<int64_t>(c.tokens.size()), .loras = c.loras});
    n += c.tokens.size();
  }
  std::vector<float> out(n * n_vocab);
  EXPECT_TRUE(m.forward(seqs, kv.store(), out.data()).ok());
  std::vector<int32_t> next(which.size());
  for (size_t i = 0; i < which.size(); ++i) {
    const SeqCase& c = cases[static_cast<size_t>(which[i])];
    next[i] = c.tokens[0];
    seqs[i].tokens = std::span(&next[i], 1);
    seqs[i].pos0 = static_cast<int64_t>(c.tokens.size());
    seqs[i].n_logits = 1;
  }
  std::vector<float> step(which.size() * n_vocab);
  EXPECT_TRUE(m.forward(seqs, kv.store(), step.data()).ok());
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

TEST(LoraBatch, SequencesWithDifferentAdaptersInOneStepGiveTheirLogitsAloneBitForBit) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  auto m = Model::load(open_base(), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE((*m)->add_lora(read(testing::kLoraTrained)).ok());      // bit 0
  ASSERT_TRUE((*m)->add_lora(read(testing::kLoraInit), 0.7f).ok());   // bit 1
  std::vector<SeqCase> cases;
  const LoraMask masks[] = {1, 2, 0, 3, 1};
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> t(static_cast<size_t>(9 + 7 * i));
    for (size_t j = 0; j < t.size(); ++j) t[j] = static_cast<int32_t>((j * 37 + 11 * i + 1) % 512);
    cases.push_back({t, masks[i]});
  }
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < 5; ++i) alone.push_back(prefill_and_decode(**m, cases, {i}));
  const std::vector<float> all = prefill_and_decode(**m, cases, {0, 1, 2, 3, 4});
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  size_t at = 0;
  for (int i = 0; i < 5; ++i) {  // prefill rows
    const size_t rows = cases[static_cast<size_t>(i)].tokens.size() * n_vocab;
    EXPECT_EQ(0, std::memcmp(all.data() + at, alone[i].data(), rows * sizeof(float))) << "prefill of sequence " << i;
    at += rows;
  }
  for (int i = 0; i < 5; ++i) {  // decode rows
    const size_t own = cases[static_cast<size_t>(i)].tokens.size() * n_vocab;
    EXPECT_EQ(0, std::memcmp(all.data() + at, alone[i].data() + own, n_vocab * sizeof(float))) << "decode " << i;
    at += n_vocab;
  }
  // The adapters matter: the same tokens under another set give other logits.
  std::vector<SeqCase> swapped = cases;
  swapped[0].loras = 2;
  const std::vector<float> other = prefill_and_decode(**m, swapped, {0});
  EXPECT_NE(0, std::memcmp(other.data(), alone[0].data(), n_vocab * sizeof(float)));
}

TEST(LoraBatch, SeveralAdaptersOnOneSequenceAddTheirDeltas) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  auto m = Model::load(open_base(), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const LoraAdapter trained = read(testing::kLoraTrained);
  ASSERT_TRUE((*m)->add_lora(trained, 1.0f).ok());   // bit 0: the whole delta
  ASSERT_TRUE((*m)->add_lora(trained, 0.25f).ok());  // bits 1, 2: a quarter and three quarters
  ASSERT_TRUE((*m)->add_lora(trained, 0.75f).ok());
  EXPECT_EQ((*m)->adapters().size(), 3);
  EXPECT_EQ((*m)->adapters().info(1).name, "stories260K-lora");
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  auto run = [&](LoraMask loras) {
    KvCache kv = (*m)->make_kv_cache(16, KvDtype::kF32).value();
    std::vector<float> logits(ids.size() * n_vocab);
    EXPECT_TRUE((*m)->forward(ids, kv, logits.data(), true, loras).ok());
    return logits;
  };
  const auto whole = run(1), split = run(6), none = run(0);
  double err = 0, moved = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(whole[i] - split[i])));
    moved = std::max(moved, static_cast<double>(std::abs(whole[i] - none[i])));
  }
  EXPECT_LT(err, 1e-4);
  EXPECT_GT(moved, 1.0);
}

TEST(LoraBatch, AnAdapterSetBeyondTheLoadedOnesIsRefused) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  auto m = Model::load(open_base(), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->add_lora(read(testing::kLoraTrained)).ok());
  KvCache kv = (*m)->make_kv_cache(16, KvDtype::kF32).value();
  std::vector<float> logits(512);
  const std::vector<int32_t> ids = {1, 403};
  const Status st = (*m)->forward(ids, kv, logits.data(), false, 2);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1 loaded"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace sluice
