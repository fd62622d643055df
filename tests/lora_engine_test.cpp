// LoRA adapters through the serving engine on stories260K: requests on
// different adapters (and none) run together and each gives the tokens it
// gives alone; the prefix cache never hands K/V computed under one adapter to
// a request on another; speculative decoding (draft model without adapter,
// prompt lookup) keeps an adapter's greedy output.
#include <condition_variable>
#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include "base/test_data.h"
#include "lora/lora_adapter.h"
#include "lora/lora_synth.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/sampler.h"
#include "sluice/engine.h"
#include "tokenizer/tokenizer.h"
#include "weights/placement.h"
#include "weights/weights_test_util.h"
#include "lora_paths.h"

namespace sluice {
namespace {

using testing::model_path;


// Greedy tokens of each finished request.
class Results {
 public:
  EventCallback callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ev.token >= 0) tokens_[ev.request].push_back(ev.token);
      if (ev.timings) {
        ++n_done_;
        cv_.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return n_done_ >= n; }));
  }
  std::vector<int32_t> tokens(RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, std::vector<int32_t>> tokens_;
  int n_done_ = 0;
};

// The single-sequence path's greedy tokens with the adapters `loras` (bits
// over {trained, init}), no stop tokens.
std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int n, LoraMask loras) {
  auto mf = open_model_file(testing::kLoraBase);
  EXPECT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)), ModelOptions{.n_threads = 2});
  EXPECT_TRUE(m.ok());
  for (const std::string& p : {testing::kLoraTrained, testing::kLoraInit}) EXPECT_TRUE((*m)->add_lora(read_lora(p).value()).ok());
  KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(prompt.size()) + n);
  Sampler greedy(SamplingParams{.temperature = 0}, static_cast<int32_t>((*m)->hparams().n_vocab));
  auto r = generate(**m, kv, prompt, greedy, GenerateParams{.stop = {.max_tokens = n}, .loras = loras});
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

EngineConfig config() {
  return EngineConfig{.model_path = testing::kLoraBase, .n_threads = 2, .check_invariants = true,
                      .loras = {{.path = testing::kLoraTrained}, {.path = testing::kLoraInit}}};
}

Request greedy_request(std::vector<int32_t> prompt, int n, std::vector<int32_t> loras) {
  return Request{.prompt = std::move(prompt), .max_tokens = n, .sampling = {.temperature = 0}, .ignore_eos = true,
                 .loras = std::move(loras)};
}

TEST(LoraEngine, RequestsOnDifferentAdaptersRunTogetherAndEachGivesItsTokensAlone) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  auto engine = Engine::create(config());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  EXPECT_EQ((*engine)->lora_names(), (std::vector<std::string>{"lora-trained", "lora-init"}));
  EXPECT_NE((*engine)->summary().find("LoRA adapters"), std::string::npos);
  const Tokenizer& tok = (*engine)->tokenizer();
  const std::vector<std::vector<int32_t>> sets = {{0}, {1}, {}, {0, 1}, {0}};
  const LoraMask masks[] = {1, 2, 0, 3, 1};
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Once upon a time", "Lily and Tim went to the park.", "The cat", "Hello", "One day"})
    prompts.push_back(tok.encode(p, true));
  Results res;
  std::vector<RequestId> ids;
  for (size_t i = 0; i < sets.size(); ++i) {
    auto id = (*engine)->submit(greedy_request(prompts[i], 40, sets[i]), res.callback());
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  res.wait(static_cast<int>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(res.tokens(ids[i]), alone(prompts[i], 40, masks[i])) << i;
  // The adapters matter here: the fine-tune and the base continue differently.
  EXPECT_NE(alone(prompts[0], 40, 1), alone(prompts[0], 40, 0));

  // Bad adapter choices are refused at submit.
  EXPECT_FALSE((*engine)->submit(greedy_request(prompts[0], 4, {2}), res.callback()).ok());
  EXPECT_FALSE((*engine)->submit(greedy_request(prompts[0], 4, {-1}), res.callback()).ok());
  EXPECT_FALSE((*engine)->submit(greedy_request(prompts[0], 4, {1, 1}), res.callback()).ok());
}

TEST(LoraEngine, ThePrefixCacheKeepsEachAdaptersBlocksApart) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  auto engine = Engine::create(config());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  // Three full blocks of prompt, one request at a time so each finds the
  // blocks of those before it in the cache.
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 50; ++i) prompt.push_back(static_cast<int32_t>((i * 37) % 500 + 5));
  Results res;
  int n = 0;
  auto run = [&](std::vector<int32_t> loras) {
    auto id = (*engine)->submit(greedy_request(prompt, 8, std::move(loras)), res.callback());
    EXPECT_TRUE(id.ok());
    res.wait(++n);
    return std::make_pair(res.tokens(*id), (*engine)->stats().prefix_hit_rate);
  };
  const auto [trained, r0] = run({0});
  EXPECT_EQ(r0, 0.0);
  const auto [base, r1] = run({});  // the same tokens without the adapter: no hit
  EXPECT_EQ(r1, 0.0);
  const auto [init, r2] = run({1});
  EXPECT_EQ(r2, 0.0);
  const auto [both, r3] = run({0, 1});
  EXPECT_EQ(r3, 0.0);
  const auto [again, r4] = run({0});  // the first request's blocks: a hit
  EXPECT_GT(r4, 0.0);
  EXPECT_EQ(trained, alone(prompt, 8, 1));
  EXPECT_EQ(base, alone(prompt, 8, 0));
  EXPECT_EQ(init, alone(prompt, 8, 2));
  EXPECT_EQ(both, alone(prompt, 8, 3));
  EXPECT_EQ(again, trained);
}

TEST(LoraEngine, SpeculativeDecodingKeepsTheAdaptersGreedyOutput) {
  SKIP_UNLESS_EXISTS(testing::kLoraTrained);
  for (const char* mode : {"draft", "lookup"}) {
    SCOPED_TRACE(mode);
    EngineConfig cfg = config();
    cfg.speculative = mode;
    if (cfg.speculative == "draft") cfg.draft_model_path = testing::kLoraBase;  // runs without the adapters
    auto engine = Engine::create(cfg);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    const Tokenizer& tok = (*engine)->tokenizer();
    const std::vector<int32_t> prompt = tok.encode("Once upon a time, there was a little boy", true);
    Results res;
    std::vector<RequestId> ids;
    for (const std::vector<int32_t>& set : {std::vector<int32_t>{0}, std::vector<int32_t>{}, std::vector<int32_t>{1}}) {
      auto id = (*engine)->submit(greedy_request(prompt, 48, set), res.callback());
      ASSERT_TRUE(id.ok());
      ids.push_back(*id);
    }
    res.wait(3);
    EXPECT_EQ(res.tokens(ids[0]), alone(prompt, 48, 1));
    EXPECT_EQ(res.tokens(ids[1]), alone(prompt, 48, 0));
    EXPECT_EQ(res.tokens(ids[2]), alone(prompt, 48, 2));
    EXPECT_GT((*engine)->stats().spec_drafted, 0);
  }
}

// Adapters stay resident while the base's layers stream under --mem-budget:
// requests on two adapters and none give the tokens they give with every
// weight resident.
TEST(LoraEngine, AdaptersApplyToStreamedLayers) {
  const std::string path = weights::testing::scratch_dir() + "/lora_streamed.gguf";
  const std::string lora0 = weights::testing::scratch_dir() + "/lora_streamed_a.gguf";
  const std::string lora1 = weights::testing::scratch_dir() + "/lora_streamed_b.gguf";
  SynthShape shape{.name = "s", .n_vocab = 1024, .n_embd = 256, .n_layer = 8, .n_head = 8, .n_head_kv = 4,
                   .n_ff = 768, .n_ctx = 256};
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "q4_0", .seed = 5, .n_threads = 2}, path).ok());
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  for (const auto& [out, seed] : {std::pair{lora0, 1}, std::pair{lora1, 2}}) {
    auto ad = synth_lora(*mf, {.rank = 8, .b_std = 0.2f, .seed = static_cast<uint64_t>(seed)});
    ASSERT_TRUE(ad.ok());
    ASSERT_TRUE(write_lora_gguf(*ad, out).ok());
  }
  auto layout = weights::plan_placement(*mf, {});
  ASSERT_TRUE(layout.ok());
  uint64_t slot = 0;
  for (const auto& l : layout->layers) slot = std::max(slot, l.extent_bytes);
  auto run = [&](uint64_t mem_budget) {
    EngineConfig cfg{.model_path = path, .n_threads = 2, .max_seqs = 4, .ctx_size = 64,
                     .mem_budget_bytes = mem_budget, .check_invariants = true,
                     .loras = {{.path = lora0}, {.path = lora1, .scale = 0.5f}}};
    auto e = Engine::create(cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (mem_budget > 0) {
      EXPECT_NE((*e)->placement_report().find("ring"), std::string::npos);
    }
    Results res;
    std::vector<RequestId> ids;
    const std::vector<std::vector<int32_t>> sets = {{0}, {1}, {}, {0, 1}};
    for (size_t i = 0; i < sets.size(); ++i) {
      const std::vector<int32_t> prompt = {1, static_cast<int32_t>(300 + i), 301, static_cast<int32_t>(302 + 2 * i)};
      ids.push_back((*e)->submit(greedy_request(prompt, 12, sets[i]), res.callback()).value());
    }
    res.wait(static_cast<int>(ids.size()));
    std::vector<std::vector<int32_t>> out;
    for (RequestId id : ids) out.push_back(res.tokens(id));
    return out;
  };
  const auto resident = run(0);
  const auto streamed = run(layout->essentials_bytes + 3 * slot + 4096);
  EXPECT_EQ(streamed, resident);
  EXPECT_NE(resident[0], resident[2]);  // the adapter changes the tokens
}

}  // namespace
}  // namespace sluice
