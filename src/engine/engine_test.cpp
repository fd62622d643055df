// The serving engine end to end on the real stories260K model.
#include "sluice/engine.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>

#include <gtest/gtest.h>

#include "base/test_data.h"
#include "engine/engine_test_util.h"
#include "kv/block_manager.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using testing::Collector;
using testing::model_path;
using testing::prompt_of;
using testing::shipped_model_path;

// Greedy reference: each request alone through the single-sequence path.
std::vector<int32_t> alone(Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt, int max_tokens) {
  KvCache kv = m.make_kv_cache(static_cast<int64_t>(prompt.size()) + max_tokens);
  Sampler greedy(SamplingParams{.temperature = 0}, static_cast<int32_t>(m.hparams().n_vocab));
  GenerateParams gp{.stop = StopCondition::for_request({}, tok.eog_ids(), /*ignore_eos=*/false, max_tokens)};
  auto r = generate(m, kv, prompt, greedy, gp);
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

// Without a KV budget the pool holds a quarter of max_seqs at full length; a
// model whose every layer attends over a window of 32 keeps at most
// ceil(32 / 16) + 1 = 3 blocks per sequence, so its pool is sized by that, not
// by the context (1024 positions: 64 blocks), and 16 sequences of 1000 tokens
// run in it.
TEST(EngineKvSizing, DefaultPoolOfAWindowedModelCountsTheWindow) {
  auto pool_of = [](int64_t n_swa, const std::string& tag) -> int64_t {
    SynthShape shape{.name = "swa", .n_vocab = 512, .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                     .n_ff = 128, .n_ctx = 1024};
    shape.n_swa = n_swa;
    const std::string path = ::testing::TempDir() + "/engine_kv_sizing_" + tag + ".gguf";
    EXPECT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "f32", .seed = 3, .n_threads = 1}, path).ok());
    auto e = Engine::create({.model_path = path, .n_threads = 1, .max_batch_tokens = 64, .max_seqs = 64,
                             .ctx_size = 1024, .kv_dtype = "f32", .kv_block_size = 16});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (!e.ok()) return -1;
    if (n_swa > 0) {
      // The pool runs sixteen windowed sequences of 1000 positions at once.
      Collector c;
      for (int i = 0; i < 16; ++i) {
        std::vector<int32_t> prompt = {static_cast<int32_t>(1 + i), 7, 9};
        EXPECT_TRUE((*e)->submit({.prompt = prompt, .max_tokens = 997, .sampling = {.temperature = 0},
                                  .ignore_eos = true}, c.callback()).ok());
      }
      c.wait(16);
      for (const auto& [id, r] : c.results_) EXPECT_EQ(r.tokens.at(0).size(), 997u) << id;
    }
    return (*e)->stats().kv_blocks_total;
  };
  EXPECT_EQ(pool_of(0, "plain"), 64 / 4 * 64);
  EXPECT_EQ(pool_of(32, "w32"), 64 / 4 * kv_window_blocks(32, 16));
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> make(EngineConfig cfg) {
    cfg.model_path = shipped_model_path("stories260K.gguf");
    cfg.n_threads = 2;
    cfg.check_invariants = true;
    auto e = Engine::create(cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(*e);
  }
};

void expect_batched_equals_alone(Engine& engine, int n_requests,
                                 const std::string& path = shipped_model_path("stories260K.gguf")) {
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  auto model = Model::load(file, ModelOptions{.n_threads = 2});
  ASSERT_TRUE(model.ok());
  const Tokenizer& tok = engine.tokenizer();
  Collector c;
  std::map<RequestId, std::pair<std::vector<int32_t>, int>> sent;
  for (int i = 0; i < n_requests; ++i) {
    Request r{.prompt = prompt_of(tok, i), .max_tokens = 8 + (i * 7) % 40, .sampling = {.temperature = 0}};
    auto id = engine.submit(r, c.callback());
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    sent[*id] = {r.prompt, r.max_tokens};
  }
  c.wait(n_requests);
  for (auto& [id, pm] : sent) {
    EXPECT_EQ(c.results_[id].tokens[0], alone(**model, tok, pm.first, pm.second)) << "request " << id;
  }
}

TEST_F(EngineTest, ThirtyTwoConcurrentRequestsMatchRunningEachAlone) {
  auto e = make(EngineConfig{.max_batch_tokens = 64, .max_seqs = 32});
  expect_batched_equals_alone(*e, 32);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_GT(s.prefix_hit_rate, 0.0);  // the prompts share prefixes
}

// The routed model through the serving path: chunked prefill (48 tokens a
// step), the prefix cache, preemption by recompute under a small KV pool.
TEST_F(EngineTest, MixtureOfExpertsModelMatchesRunningEachAlone) {
  const std::string path = shipped_model_path("stories-moe-f16.gguf");
  EngineConfig cfg{.max_batch_tokens = 48, .max_seqs = 16, .ctx_size = 128, .kv_budget_bytes = 24 * 2 * 4 * 16 * 32 * 4};
  cfg.model_path = path;
  cfg.n_threads = 2;
  cfg.check_invariants = true;
  auto e = Engine::create(cfg);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_batched_equals_alone(**e, 24, path);
  EXPECT_GT((*e)->stats().prefix_hit_rate, 0.0);
  EXPECT_EQ((*e)->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, MatchesAloneUnderPreemptionWithASmallKvBudget) {
  // 24 blocks of 16 tokens: far less than 32 requests need, so sequences are preempted.
  auto e = make(EngineConfig{.max_batch_tokens = 48, .max_seqs = 16, .ctx_size = 128,
                             .kv_budget_bytes = 24 * 2 * 5 * 16 * 32 * 4});
  expect_batched_equals_alone(*e, 32);
  EXPECT_GT(e->stats().preemptions, 0);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, MatchesAloneWithSwapPreemption) {
  auto e = make(EngineConfig{.max_batch_tokens = 48, .max_seqs = 16, .ctx_size = 128,
                             .kv_budget_bytes = 24 * 2 * 5 * 16 * 32 * 4, .preempt_swap = true});
  expect_batched_equals_alone(*e, 24);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, ParallelSamplesShareThePromptAndAreReproducible) {
  auto e = make(EngineConfig{});
  Request r{.prompt = prompt_of(e->tokenizer(), 0), .max_tokens = 20, .n = 4,
            .sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7}};
  Collector c1, c2;
  auto a = e->submit(r, c1.callback());
  ASSERT_TRUE(a.ok());
  c1.wait(1);
  auto b = e->submit(r, c2.callback());
  ASSERT_TRUE(b.ok());
  c2.wait(1);
  auto& ra = c1.results_[*a];
  ASSERT_EQ(ra.tokens.size(), 4u);
  EXPECT_EQ(ra.tokens, c2.results_[*b].tokens);  // same seeds, same outputs
  EXPECT_NE(ra.tokens[0], ra.tokens[1]);         // different seeds per output
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, StopStringsCutTheTextAndEndTheOutput) {
  auto e = make(EngineConfig{});
  Collector c;
  Request r{.prompt = prompt_of(e->tokenizer(), 0), .max_tokens = 60, .sampling = {.temperature = 0},
            .stop_strings = {"Lily"}};
  auto id = e->submit(r, c.callback());
  ASSERT_TRUE(id.ok());
  c.wait(1);
  const auto& res = c.results_[*id];
  EXPECT_EQ(res.reason.at(0), FinishReason::kStop);
  EXPECT_EQ(res.text.at(0), ", there was a little girl named ");  // the reference story, cut before "Lily"
}

TEST_F(EngineTest, AbortFreesBlocksAndOtherRequestsFinish) {
  auto e = make(EngineConfig{});
  Collector c;
  Request longr{.prompt = prompt_of(e->tokenizer(), 1), .max_tokens = 400, .sampling = {.temperature = 0}, .ignore_eos = true};
  Request shortr{.prompt = prompt_of(e->tokenizer(), 2), .max_tokens = 10, .sampling = {.temperature = 0}};
  auto a = e->submit(longr, c.callback());
  auto b = e->submit(shortr, c.callback());
  ASSERT_TRUE(a.ok() && b.ok());
  e->abort(*a);
  c.wait(2);
  EXPECT_EQ(c.results_[*a].reason.at(0), FinishReason::kAbort);
  EXPECT_EQ(c.results_[*b].tokens.at(0).size(), 10u);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST_F(EngineTest, RefusesBadRequestsAndTooManyQueued) {
  auto e = make(EngineConfig{.max_seqs = 1, .ctx_size = 64, .max_queued = 1});
  EXPECT_EQ(e->submit(Request{}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->submit(Request{.prompt = {1, 2}, .max_tokens = 100}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->submit(Request{.prompt = {1, 99999}}, {}).status().code(), StatusCode::kInvalidArgument);
  Request slow{.prompt = {1}, .max_tokens = 60, .sampling = {.temperature = 0}, .ignore_eos = true};
  Collector c;
  // The first request's callback holds the engine thread at its first event until
  // the third submit has been refused, so no request can finish in between.
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  bool open = false;
  EventCallback inner = c.callback();
  EventCallback gated = [&](const TokenEvent& ev) {
    {
      std::unique_lock<std::mutex> lock(gate_mu);
      gate_cv.wait(lock, [&] { return open; });
    }
    inner(ev);
  };
  ASSERT_TRUE(e->submit(slow, gated).ok());
  EXPECT_TRUE(e->submit(slow, c.callback()).ok());
  EXPECT_EQ(e->submit(slow, c.callback()).status().code(), StatusCode::kResourceExhausted);
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    open = true;
  }
  gate_cv.notify_all();
  c.wait(2);
}

}  // namespace
}  // namespace sluice
