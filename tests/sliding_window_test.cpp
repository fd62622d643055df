// Sliding-window models end to end: the windowed forward pass against the
// scalar reference backend, and the serving engine freeing the KV blocks that
// left the window, so a long generation's blocks in use stay flat, while its
// tokens stay those of a full-cache run of the same model.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/op_test_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "sluice/engine.h"

namespace sluice {
namespace {

std::string synth_path(int64_t n_swa, const std::string& tag) {
  SynthShape shape{.name = "swa", .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                   .n_ff = 256, .n_ctx = 1024};
  shape.n_swa = n_swa;
  const std::string path = ::testing::TempDir() + "/sliding_window_" + tag + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = "f32", .seed = 11, .n_threads = 2}, path);
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  return path;
}

std::shared_ptr<const ModelFile> open(const std::string& path) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return std::make_shared<const ModelFile>(std::move(*mf));
}

std::vector<int32_t> tokens_of(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 5) % n_vocab);
  return t;
}

std::vector<float> prefill_logits(Model& m, const std::vector<int32_t>& toks) {
  std::vector<float> out(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
  KvCache kv = m.make_kv_cache(static_cast<int64_t>(toks.size()));
  EXPECT_TRUE(m.forward(toks, kv, out.data(), true).ok());
  return out;
}

// Window 8 on both layers: the CPU backend agrees with the scalar reference; the
// first 8 positions (whose window covers everything) have the bits of the same
// weights without a window, and later ones differ.
TEST(SlidingWindowModel, CpuMatchesReferenceAndTheWindowApplies) {
  auto windowed = open(synth_path(8, "w8"));
  auto plain = open(synth_path(0, "w0"));
  auto cpu = Model::load(windowed, ModelOptions{.n_threads = 2, .n_batch = 16});
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ((*cpu)->hparams().n_swa, 8);
  EXPECT_EQ((*cpu)->hparams().kv_window(), 8);
  EXPECT_NE(hparams_summary((*cpu)->hparams()).find("sliding window 8"), std::string::npos);
  auto ref = Model::load(windowed, ModelOptions{.n_batch = 16, .backend = create_backend({.name = "reference"}).value()});
  auto full = Model::load(plain, ModelOptions{.n_threads = 2, .n_batch = 16});
  ASSERT_TRUE(ref.ok() && full.ok());
  const int64_t n_vocab = (*cpu)->hparams().n_vocab, n = 40;
  const auto toks = tokens_of(n, n_vocab);
  const auto a = prefill_logits(**cpu, toks), b = prefill_logits(**ref, toks), c = prefill_logits(**full, toks);
  EXPECT_LT(cpu::testing::nmse(a.data(), b.data(), a.size()), 1e-8);
  const size_t head = static_cast<size_t>(8 * n_vocab);
  EXPECT_EQ(std::memcmp(a.data(), c.data(), head * 4), 0);
  EXPECT_GT(cpu::testing::nmse(a.data() + head, c.data() + head, a.size() - head), 1e-6);
}

// Decoding token by token gives the bits of one prefill (the window's chunk
// grid is a function of the position only).
TEST(SlidingWindowModel, DecodeEqualsPrefillBitForBit) {
  auto file = open(synth_path(24, "w24"));
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 16});
  ASSERT_TRUE(m.ok());
  const int64_t n_vocab = (*m)->hparams().n_vocab, n = 60;
  const auto toks = tokens_of(n, n_vocab);
  const auto all = prefill_logits(**m, toks);
  KvCache kv = (*m)->make_kv_cache(n);
  std::vector<float> one(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*m)->forward(std::span(toks.data() + i, 1), kv, one.data(), false).ok());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + i * n_vocab, one.size() * 4), 0) << "token " << i;
  }
}

// Greedy tokens of a full-cache run (nothing freed): the reference for the engine.
std::vector<int32_t> greedy_full_cache(const std::string& path, const std::vector<int32_t>& prompt, int64_t n_gen) {
  auto m = Model::load(open(path), ModelOptions{.n_threads = 2, .n_batch = 16});
  EXPECT_TRUE(m.ok());
  const int64_t n_vocab = (*m)->hparams().n_vocab;
  KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(prompt.size()) + n_gen);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  EXPECT_TRUE((*m)->forward(prompt, kv, logits.data(), false).ok());
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n_gen; ++i) {
    const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (i + 1 < n_gen) {
      EXPECT_TRUE((*m)->forward(std::span(&out.back(), 1), kv, logits.data(), false).ok());
    }
  }
  return out;
}

// Runs one greedy request of n_gen tokens to its end; on_token sees each token
// as it arrives (on the engine's thread). Returns the tokens, or {} on timeout.
std::vector<int32_t> generate(Engine& engine, const std::vector<int32_t>& prompt, int64_t n_gen,
                              const std::function<void(int32_t)>& on_token = {}) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  Request r{.prompt = prompt, .max_tokens = static_cast<int32_t>(n_gen), .sampling = {.temperature = 0},
            .ignore_eos = true};
  auto id = engine.submit(r, [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    if (ev.token >= 0) {
      got.push_back(ev.token);
      if (on_token) on_token(ev.token);
    }
    if (ev.timings) {
      done = true;
      cv.notify_all();
    }
  });
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  if (!id.ok()) return {};
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(300), [&] { return done; }));
  return done ? got : std::vector<int32_t>{};
}

// The must-show: window 32, blocks of 16, 300 generated tokens in a KV
// pool of 8 blocks (128 positions). Sampled at every token, the blocks in use
// never exceed ceil(32 / 16) + 1 = 3 once the window is passed, the pool never
// needs more than its 8 blocks, and the tokens are those of a full-cache run.
TEST(SlidingWindowEngine, KvBlocksStayFlatPastTheWindowAndTokensMatchAFullCacheRun) {
  const std::string path = synth_path(32, "w32");
  const int64_t n_gen = 300;
  const std::vector<int32_t> prompt = tokens_of(20, 512);
  const std::vector<int32_t> want = greedy_full_cache(path, prompt, n_gen);
  EXPECT_NE(want, greedy_full_cache(synth_path(0, "w0_engine"), prompt, n_gen))
      << "the window must change the tokens for this check to mean anything";

  // One block: 2 layers x K and V x 16 positions x 64 f32 values.
  const uint64_t block_bytes = 2 * 2 * 16 * 64 * 4;
  EngineConfig cfg{.model_path = path, .n_threads = 2, .max_batch_tokens = 16, .max_seqs = 1, .ctx_size = 512,
                   .kv_budget_bytes = 8 * block_bytes, .kv_dtype = "f32", .kv_block_size = 16,
                   .check_invariants = true};
  auto e = Engine::create(cfg);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  Engine& engine = **e;
  ASSERT_EQ(engine.stats().kv_blocks_total, 8);
  EXPECT_NE(engine.summary().find("sliding window 32: blocks behind it freed"), std::string::npos) << engine.summary();

  std::vector<int64_t> used;  // blocks in use when each token arrives
  const std::vector<int32_t> got =
      generate(engine, prompt, n_gen, [&](int32_t) { used.push_back(engine.stats().kv_blocks_used); });
  EXPECT_EQ(got, want);
  ASSERT_EQ(static_cast<int64_t>(used.size()), n_gen);
  int64_t peak_past_window = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    if (static_cast<int64_t>(prompt.size() + i) >= 32) peak_past_window = std::max(peak_past_window, used[i]);
  }
  EXPECT_GT(peak_past_window, 0);
  EXPECT_LE(peak_past_window, 3);
  std::printf("blocks in use past the window: at most %lld of 8 over %lld tokens (full cache would need %lld)\n",
              static_cast<long long>(peak_past_window), static_cast<long long>(n_gen),
              static_cast<long long>((static_cast<int64_t>(prompt.size()) + n_gen + 15) / 16));
}

// Speculative decoding with a windowed draft model (the same file: every draft
// is accepted, so rounds are long) in the 8-block pool: the target's blocks stay
// at the window's, the draft model's own pool frees its blocks too (checked in
// spec/draft_model_test.cpp), and the tokens are still the full-cache run's.
TEST(SlidingWindowEngine, WindowedDraftModelKeepsTheTokens) {
  const std::string path = synth_path(32, "w32_draft");
  const int64_t n_gen = 300;
  const std::vector<int32_t> prompt = tokens_of(20, 512);
  const std::vector<int32_t> want = greedy_full_cache(path, prompt, n_gen);
  const uint64_t block_bytes = 2 * 2 * 16 * 64 * 4;
  EngineConfig cfg{.model_path = path, .n_threads = 2, .max_batch_tokens = 16, .max_seqs = 1, .ctx_size = 512,
                   .kv_budget_bytes = 8 * block_bytes, .kv_dtype = "f32", .kv_block_size = 16,
                   .check_invariants = true, .speculative = "draft", .draft_model_path = path, .spec_max_draft = 4,
                   .spec_adaptive = false};
  auto e = Engine::create(cfg);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  Engine& engine = **e;
  const std::vector<int32_t> got = generate(engine, prompt, n_gen);
  EXPECT_EQ(got, want);
  EXPECT_NE(engine.summary().find("sliding window 32: blocks behind it freed"), std::string::npos) << engine.summary();
  // Drafting ran the whole way (the draft is the target: nearly all accepted).
  EXPECT_GT(engine.stats().spec_drafted, n_gen / 2);
  EXPECT_GT(engine.stats().spec_acceptance_rate(), 0.9);
}

}  // namespace
}  // namespace sluice
