// The optimizer loop: a run resumed from a checkpoint equals the run that
// never stopped, bit for bit; the schedule; bad settings refused; whole runs
// of finetune() lower the held-out loss and never leave a partial adapter.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/reference_backend.h"
#include "base/test_data.h"
#include "train/train_test_data.h"
#include "format/model_file.h"
#include "train/finetune.h"
#include "train/lora_init.h"

namespace sluice {
namespace {



std::unique_ptr<Model> load_base() {
  auto mf = open_model_file(testing::kFinetuneBase);
  EXPECT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                       {.n_batch = 1, .max_seqs = 1, .backend = std::make_shared<ReferenceBackend>(), .repack = false});
  EXPECT_TRUE(m.ok());
  return std::move(*m);
}

// A small synthetic data set: windows of a token pattern.
TrainData pattern_data(int64_t n_examples, int64_t seq) {
  TrainData d;
  for (int64_t e = 0; e < n_examples; ++e) {
    TrainExample ex;
    for (int64_t i = 0; i < seq; ++i) {
      ex.tokens.push_back(static_cast<int32_t>(1 + (e * 7 + i * 3) % 500));
      ex.targets.push_back(static_cast<int32_t>(1 + (e * 7 + (i + 1) * 3) % 500));
    }
    d.n_tokens += seq;
    d.n_counted += seq;
    d.hash = d.hash * 31 + static_cast<uint64_t>(e);
    d.examples.push_back(ex);
  }
  return d;
}

std::vector<float> train_params(Model& model, const TrainData& data, const TrainerOptions& o, int64_t stop_at,
                                const std::string& ckpt_out, const std::string& resume_from) {
  auto targets = parse_lora_targets("q,v,down");
  EXPECT_TRUE(targets.ok());
  auto ad = init_lora(model, {.targets = *targets, .rank = 2, .alpha = 4.0f, .seed = o.seed, .name = "t"});
  EXPECT_TRUE(ad.ok()) << ad.status().to_string();
  auto p = LoraParams::create(model.backend(), *ad);
  EXPECT_TRUE(p.ok());
  auto t = LoraTrainer::create(model, *p, data, o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!resume_from.empty()) {
    const Status st = (*t)->load_checkpoint(resume_from);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  while ((*t)->step() < stop_at) EXPECT_TRUE((*t)->train_step().ok());
  if (!ckpt_out.empty()) {
    EXPECT_TRUE((*t)->save_checkpoint(ckpt_out).ok());
  }
  return std::vector<float>(p->params(), p->params() + p->n_params());
}

TEST(LoraTrainer, AResumedRunEqualsTheRunThatNeverStopped) {
  auto model = load_base();
  const TrainData data = pattern_data(5, 12);
  const TrainerOptions o{.steps = 6, .batch = 2, .grad_accum = 2, .seq = 12, .lr = 1e-2f, .warmup = 2, .seed = 3};
  const std::string ckpt = ::testing::TempDir() + "trainer_resume.ckpt";
  const std::vector<float> straight = train_params(*model, data, o, 6, "", "");
  train_params(*model, data, o, 3, ckpt, "");
  const std::vector<float> resumed = train_params(*model, data, o, 6, "", ckpt);
  ASSERT_EQ(straight.size(), resumed.size());
  EXPECT_EQ(0, std::memcmp(straight.data(), resumed.data(), straight.size() * sizeof(float)));
  // The checkpoint is also an adapter (the moments beside its factors are skipped).
  auto ad = read_lora(ckpt);
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_EQ(ad->mats.size(), 15u);  // q, v, down x 5 layers

  // Another seed, batch or data is refused by name.
  TrainerOptions other = o;
  other.seed = 4;
  auto p = LoraParams::create(model->backend(), *ad);
  ASSERT_TRUE(p.ok());
  auto t = LoraTrainer::create(*model, *p, data, other);
  ASSERT_TRUE(t.ok());
  const Status st = (*t)->load_checkpoint(ckpt);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("--seed"), std::string::npos) << st.to_string();
  std::filesystem::remove(ckpt);
}

TEST(LoraTrainer, WarmupThenCosine) {
  auto model = load_base();
  const TrainData data = pattern_data(4, 8);
  auto ad = init_lora(*model, {.targets = {TensorRole::kAttnQ}, .rank = 1, .alpha = 1.0f});
  ASSERT_TRUE(ad.ok());
  auto p = LoraParams::create(model->backend(), *ad);
  ASSERT_TRUE(p.ok());
  auto t = LoraTrainer::create(*model, *p, data,
                               {.steps = 12, .batch = 1, .seq = 8, .lr = 1.0f, .warmup = 2, .min_lr_ratio = 0.1f});
  ASSERT_TRUE(t.ok());
  EXPECT_FLOAT_EQ((*t)->lr_at(0), 0.5f);
  EXPECT_FLOAT_EQ((*t)->lr_at(1), 1.0f);
  EXPECT_FLOAT_EQ((*t)->lr_at(2), 1.0f);
  EXPECT_NEAR((*t)->lr_at(7), 0.55f, 1e-6);  // halfway down the cosine
  EXPECT_GT((*t)->lr_at(11), 0.1f);
  EXPECT_LT((*t)->lr_at(11), 0.15f);
  // --epochs: ceil(epochs * examples / (batch * grad_accum)) steps.
  auto e = LoraTrainer::create(*model, *p, data, {.epochs = 2.5, .batch = 3, .seq = 8});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->n_steps(), 4);
  EXPECT_FALSE(LoraTrainer::create(*model, *p, data, {.batch = 0, .seq = 8}).ok());
  EXPECT_FALSE(LoraTrainer::create(*model, *p, data, {.steps = 1, .seq = 8, .lr = -1.0f}).ok());
}

TEST(Finetune, LowersTheHeldOutLossAndWritesTheAdapter) {
  const std::string out = ::testing::TempDir() + "finetune_test.gguf";
  std::filesystem::remove(out);
  std::vector<std::string> lines;
  auto res = finetune({.model_path = testing::kFinetuneBase, .data_path = testing::kFinetuneStories, .out_path = out, .val_data_path = testing::kFinetuneHeldout,
                       .rank = 4, .alpha = 8.0f,
                       .train = {.steps = 8, .batch = 2, .seq = 32, .lr = 3e-3f, .seed = 1},
                       .eval_every = 100, .backend = "reference"},
                      [&](const std::string& l) { lines.push_back(l); });
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_LT(res->heldout_after, res->heldout_before - 0.1);
  auto ad = read_lora(out);
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_EQ(ad->mats.size(), 35u);
  EXPECT_EQ(ad->mats[0].rank, 4);
  bool progress = false;
  for (const std::string& l : lines) progress |= l.find("step 8/8") != std::string::npos;
  EXPECT_TRUE(progress);
  std::filesystem::remove(out);
}

TEST(Finetune, RefusesBadInputWithoutWritingAnAdapter) {
  const std::string out = ::testing::TempDir() + "finetune_bad.gguf";
  const std::string empty = ::testing::TempDir() + "finetune_empty.txt";
  { std::ofstream(empty) << ""; }
  auto quiet = [](const std::string&) {};
  FinetuneOptions o{.model_path = testing::kFinetuneBase, .data_path = empty, .out_path = out, .val_split = 0,
                    .train = {.steps = 1, .batch = 1, .seq = 16}, .backend = "reference"};
  auto r = finetune(o, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("tokenizes to nothing"), std::string::npos) << r.status().to_string();
  o.data_path = testing::kFinetuneStories;
  o.targets = "q,bogus";
  r = finetune(o, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("bogus"), std::string::npos);
  o.targets = "all";
  o.rank = 100;  // wider than the 32-row attn_k
  r = finetune(o, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("--rank"), std::string::npos) << r.status().to_string();
  o.rank = 4;
  o.train.lr = 1e30f;  // diverges
  o.train.grad_clip = 0;
  o.train.steps = 3;
  r = finetune(o, quiet);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("diverged"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(out));
  o.init_adapter = testing::shipped_model_path("stories-moe-f16.gguf");  // not an adapter
  o.train.lr = 1e-3f;
  r = finetune(o, quiet);
  EXPECT_FALSE(r.ok());
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace sluice
