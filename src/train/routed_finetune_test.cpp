// Fine-tuning a mixture-of-experts model (stories-moe, 4 routed layers of 16
// experts, top 2) end to end on the CPU:
//   - the held-out loss falls, and `--targets all` adapts what a routed model
//     has: its attention;
//   - with the experts streamed one by one under --mem-budget (the smallest
//     budget that works: one routed layer's experts in the pool), the adapter
//     is the resident run's byte for byte, and the disk read about what the
//     placement predicted (both visits' missed experts);
//   - the training forward is the inference forward: the adapter applied at
//     inference (f32 KV cache) gives the losses the training step's
//     evaluation gives;
//   - going forward, each routed layer above the first has its experts
//     guessed (read ahead) from the rows below it, and the guess mostly
//     holds;
//   - an FFN target is refused by name;
//   - on cuda it trains as on the CPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include "base/test_data.h"
#include "format/model_file.h"
#include "lora/lora_adapter.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "runtime/load_model.h"
#include "train/finetune.h"
#include "train/lora_init.h"
#include "train/lora_params.h"
#include "train/step_meter.h"
#include "train/train_step.h"
#include "train/train_test_data.h"
#include "weights/placement.h"
#include "weights/store_source.h"

namespace sluice {
namespace {

// The smallest --mem-budget that works for `mf`, as the planner's refusal of
// a 1-byte budget says it; 0 (and a failure) when it does not.
uint64_t smallest_budget(const ModelFile& mf) {
  auto too_small = weights::plan_placement(mf, {.mem_budget_bytes = 1, .disk_gbps = 1, .layer_compute_s = 1e-3});
  EXPECT_FALSE(too_small.ok());
  if (too_small.ok()) return 0;
  const std::string why = too_small.status().message();
  const std::string said = "the smallest budget that works is ";
  const size_t at = why.find(said);
  EXPECT_NE(at, std::string::npos) << why;
  return at == std::string::npos ? 0 : std::stoull(why.substr(at + said.size()));
}

TEST(RoutedFinetune, StoriesMoeLearnsAndStreamedExpertsGiveTheResidentAdapter) {
  const std::string base = testing::shipped_model_path("stories-moe-f16.gguf");
  auto mf = open_model_file(base);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const uint64_t budget = smallest_budget(*mf);
  ASSERT_GT(budget, 0u);
  ASSERT_LT(budget, mf->total_tensor_bytes() / 2);

  const std::string tag = std::to_string(getpid());
  const std::string dir_a = ::testing::TempDir() + "routed_finetune_resident_" + tag + "/";
  const std::string dir_b = ::testing::TempDir() + "routed_finetune_streamed_" + tag + "/";
  std::filesystem::create_directories(dir_a);
  std::filesystem::create_directories(dir_b);
  FinetuneOptions o{.model_path = base, .data_path = testing::kFinetuneStories, .out_path = dir_a + "adapter.gguf",
                    .val_data_path = testing::kFinetuneHeldout, .rank = 4, .alpha = 8.0f,
                    .train = {.steps = 6, .batch = 4, .seq = 48, .lr = 3e-3f, .seed = 3},
                    .eval_every = 100, .backend = "cpu", .n_threads = 2};
  std::vector<std::string> lines;
  auto log = [&](const std::string& l) { lines.push_back(l); };
  auto resident = finetune(o, log);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  EXPECT_LT(resident->heldout_after, resident->heldout_before - 0.05);
  auto ad = read_lora(o.out_path);
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_EQ(ad->mats.size(), 16u);  // q, k, v, o of 4 layers
  for (const LoraMatrix& m : ad->mats) EXPECT_EQ(m.base_name.find("ffn"), std::string::npos) << m.base_name;

  o.out_path = dir_b + "adapter.gguf";
  o.mem_budget_bytes = budget;
  lines.clear();
  auto streamed = finetune(o, log);
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  const std::string a = testing::file_bytes(dir_a + "adapter.gguf");
  ASSERT_GT(a.size(), 0u);
  EXPECT_TRUE(a == testing::file_bytes(dir_b + "adapter.gguf")) << "the streamed run's adapter differs from the resident run's";
  EXPECT_EQ(resident->last_loss, streamed->last_loss);
  EXPECT_NE(all.find("experts: a pool of 16 slots"), std::string::npos) << all;
  EXPECT_NE(all.find("order: training; a micro-batch of 192 tokens routes each layer twice"), std::string::npos)
      << all;
  // 192 tokens choose nearly every expert of a layer, and the pool holds one
  // layer's: about all of them read at each visit, twice a micro-batch
  // (read in whole aligned extents, a little over the experts' bytes; the
  // backward's first layer finds some of the forward's still in place).
  const StepFigures& t = streamed->timing;
  ASSERT_TRUE(t.streamed);
  EXPECT_GT(t.predicted_read_bytes, 0) << all;
  EXPECT_GT(t.measured_read_bytes, 0.75 * t.predicted_read_bytes) << all;
  EXPECT_LT(t.measured_read_bytes, 1.35 * t.predicted_read_bytes) << all;

  // The trained adapter at inference: each held-out sequence's mean loss from
  // the logits equals the training step's evaluation of it.
  auto tok = Tokenizer::from_metadata(mf->metadata);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto be = create_backend({.name = "cpu", .n_threads = 2});
  ASSERT_TRUE(be.ok());
  auto model = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                           {.n_batch = 1, .max_seqs = 1, .backend = *be, .repack = false});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Model& m = **model;
  auto params = LoraParams::create(m.backend(), *ad);
  ASSERT_TRUE(params.ok()) << params.status().to_string();
  auto step = TrainStep::create(m, *params, {.max_tokens = 64, .max_seq = 64});
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  ASSERT_TRUE(m.add_lora(*ad).ok());
  const int64_t n_vocab = m.hparams().n_vocab;
  const std::vector<std::vector<int32_t>> seqs = {
      (*tok)->encode("Once upon a time, there was a little dog named Max. Max liked to run in the park.", true),
      (*tok)->encode("Lily and Tom went to the beach. They built a big castle and found a shell.", true)};
  double worst = 0;
  for (const std::vector<int32_t>& ids : seqs) {
    const auto n = static_cast<int64_t>(ids.size()) - 1;
    ASSERT_GT(n, 8);
    TrainBatch b{.tokens = std::vector<int32_t>(ids.begin(), ids.end() - 1),
                 .targets = std::vector<int32_t>(ids.begin() + 1, ids.end()), .seqs = {{0, n}}};
    auto train_loss = (*step)->evaluate(b);
    ASSERT_TRUE(train_loss.ok()) << train_loss.status().to_string();
    KvCache kv = m.make_kv_cache(n, KvDtype::kF32).value();
    std::vector<float> logits(static_cast<size_t>(n * n_vocab));
    ASSERT_TRUE(m.forward(b.tokens, kv, logits.data(), /*all_logits=*/true, /*loras=*/1).ok());
    double loss = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* z = logits.data() + t * n_vocab;
      double mx = z[0], sum = 0;
      for (int64_t v = 1; v < n_vocab; ++v) mx = std::max(mx, static_cast<double>(z[v]));
      for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(z[v] - mx);
      loss += mx + std::log(sum) - z[b.targets[static_cast<size_t>(t)]];
    }
    worst = std::max(worst, std::abs(loss - *train_loss) / std::abs(loss));
  }
  EXPECT_LT(worst, 1e-4);
  RecordProperty("loss_max_rel_err", fmt::format("{:.3g}", worst));
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}

// With experts streamed and room in the pool for two routed layers' worth, a
// forward pass (evaluate(): no backward, so nothing else predicts) guesses
// each routed layer's experts from the rows of the layer below before they
// reach it. The first routed layer has no layer below to guess from.
TEST(RoutedFinetune, TheForwardGuessesTheNextRoutedLayersExperts) {
  const std::string base = testing::shipped_model_path("stories-moe-f16.gguf");
  auto mf = open_model_file(base);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  const uint64_t least = smallest_budget(*mf);
  ASSERT_GT(least, 0u);
  const int64_t seq = 64;
  auto work = train_workload(seq, 4, "q,k,v,o", "");
  ASSERT_TRUE(work.ok()) << work.status().to_string();
  auto lm = load_model(base, {.n_threads = 2, .n_batch = 1, .max_seqs = 1, .repack = false, .backend = "cpu",
                              .mem_budget_bytes = least + (1 << 20), .tokens_per_step = seq, .training = *work});
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  ASSERT_NE(lm->stream, nullptr);
  ASSERT_GE(lm->stream->store().expert_stats().n_slots, 32) << lm->placement_report;
  Model& m = *lm->model;
  auto targets = parse_lora_targets("q,k,v,o");
  ASSERT_TRUE(targets.ok());
  auto ad = init_lora(m, {.targets = *targets, .rank = 4, .alpha = 8.0f, .seed = 1, .name = "guess"});
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  auto params = LoraParams::create(m.backend(), *ad);
  ASSERT_TRUE(params.ok()) << params.status().to_string();
  auto step = TrainStep::create(m, *params, {.max_tokens = seq, .max_seq = seq});
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  std::vector<int32_t> ids = lm->tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her big red "
      "ball. One day, her mom said they could go to the park, and Lily was very happy.",
      true);
  ASSERT_GT(ids.size(), 40u);
  const auto n = static_cast<int64_t>(ids.size()) - 1;
  TrainBatch b{.tokens = std::vector<int32_t>(ids.begin(), ids.end() - 1),
               .targets = std::vector<int32_t>(ids.begin() + 1, ids.end()), .seqs = {{0, n}}};
  auto loss = (*step)->evaluate(b);
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  const weights::ExpertStatsSnapshot s = lm->stream->store().expert_stats();
  ASSERT_EQ(s.layers.size(), 4u);
  EXPECT_EQ(s.layers[0].predicted, 0u);
  for (size_t l = 1; l < 4; ++l) {
    const weights::ExpertLayerStats& x = s.layers[l];
    EXPECT_GT(x.chosen, 0u) << "layer " << l;
    EXPECT_GT(x.predicted, 0u) << "layer " << l;
    // The layer below's rows are close to the layer's own: most chosen experts were guessed.
    EXPECT_GT(x.recall(), 0.5) << "layer " << l << ": " << s.table();
  }
}

// An FFN target named on a routed model is refused by name (its FFN is the
// experts'), and nothing is written.
TEST(RoutedFinetune, AnFfnTargetOnARoutedModelIsRefusedByName) {
  const std::string out = ::testing::TempDir() + "routed_finetune_gate_" + std::to_string(getpid()) + ".gguf";
  auto r = finetune({.model_path = testing::shipped_model_path("stories-moe-f16.gguf"),
                     .data_path = testing::kFinetuneStories, .out_path = out, .val_split = 0, .targets = "q,gate",
                     .train = {.steps = 1, .batch = 1, .seq = 16}, .backend = "cpu", .n_threads = 2},
                    [](const std::string&) {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no ffn_gate matrix to adapt"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("mixture-of-experts model is routed"), std::string::npos)
      << r.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(out));
}

// On cuda (where it can be created: a GPU or the emulator) a routed model
// trains as on the CPU: the same first loss (the forward before any update)
// within float rounding, and the same trajectory over a few steps. Micro-
// batches of 24 tokens stay under the tensor-core path's threshold (32 for
// F16: from there the GPU rounds activations to BF16, ~3e-4 of the loss).
// Over three tiers (--gpu-budget and --mem-budget under the model: experts
// read from the file into host RAM and copied into device slots, the dense
// layers copied in at each visit) the adapter is the resident one, bit for bit.
TEST(RoutedFinetune, CudaTrainsARoutedModelAsTheCpuDoes) {
  if (auto be = create_backend({.name = "cuda", .n_threads = 2}); !be.ok()) GTEST_SKIP() << be.status().to_string();
  const std::string tag = std::to_string(getpid());
  FinetuneResult got[3];
  std::string adapter[3];
  for (int i = 0; i < 3; ++i) {
    const char* backend = i == 0 ? "cpu" : "cuda";
    // One file name in three folders (an adapter records its name).
    const std::string dir = ::testing::TempDir() + "routed_finetune_" + std::to_string(i) + "_" + tag + "/";
    std::filesystem::create_directories(dir);
    const std::string out = dir + "adapter.gguf";
    const uint64_t gpu_budget = i == 2 ? 1500 << 10 : 0, mem_budget = i == 2 ? 2500 << 10 : 0;  // the file: 2.5 MiB
    auto r = finetune({.model_path = testing::shipped_model_path("stories-moe-f16.gguf"),
                       .data_path = testing::kFinetuneStories, .out_path = out, .val_split = 0, .rank = 4,
                       .alpha = 8.0f, .train = {.steps = 3, .batch = 1, .seq = 24, .lr = 3e-3f, .seed = 3},
                       .backend = backend, .n_threads = 2, .mem_budget_bytes = mem_budget,
                       .gpu_budget_bytes = gpu_budget},
                      [](const std::string&) {});
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().to_string();
    adapter[i] = testing::file_bytes(out);
    EXPECT_FALSE(adapter[i].empty());
    std::filesystem::remove_all(dir);
    got[i] = *r;
  }
  EXPECT_TRUE(adapter[2] == adapter[1]) << "the adapter over three tiers differs from the resident one";
  EXPECT_GT(got[2].timing.measured_read_bytes, 0.0);  // experts read from the file ...
  EXPECT_GT(got[2].timing.measured_copy_bytes, 0.0);  // ... and layers copied to the device each step
  RecordProperty("first_loss_relative", fmt::format("{:.3g}", std::abs(got[1].first_loss / got[0].first_loss - 1)));
  RecordProperty("last_loss_relative", fmt::format("{:.3g}", std::abs(got[1].last_loss / got[0].last_loss - 1)));
  EXPECT_NEAR(got[1].first_loss, got[0].first_loss, 1e-6 * got[0].first_loss);
  EXPECT_NEAR(got[1].last_loss, got[0].last_loss, 1e-5 * got[0].last_loss);
  EXPECT_LT(got[1].last_loss, got[1].first_loss);
}

}  // namespace
}  // namespace sluice
