// Speculative decoding through the engine on the real stories260K model:
// greedy output is token-identical with and without drafts (prompt lookup and
// draft models, alone and in a batch of mixed requests), and sampled output keeps
// the target's distribution (chi-square against the exact conditional).
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sluice/engine.h"
#include "spec/chi_square_test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using testing::shipped_model_path;

// Collects the tokens of every output of every request.
class Collector {
 public:
  EventCallback callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ev.token >= 0) tokens_[ev.request][ev.index].push_back(ev.token);
      if (ev.finished) text_done_[ev.request][ev.index] = ev.finish_reason;
      if (ev.timings) {
        ++n_done_;
        cv_.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(300), [&] { return n_done_ >= n; }));
  }
  std::map<RequestId, std::map<int, std::vector<int32_t>>> tokens_;
  std::map<RequestId, std::map<int, FinishReason>> text_done_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_done_ = 0;
};

class SpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = shipped_model_path("stories260K.gguf");
  }
  // check: verify the KV accounting after every step (slow for many requests).
  std::unique_ptr<Engine> make(EngineConfig cfg, bool check = true) {
    cfg.model_path = target_;
    cfg.n_threads = 2;
    cfg.check_invariants = check;
    auto e = Engine::create(cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  }
  // A Q4_0 copy of the target: a draft that agrees often, not always.
  std::string q4_copy() {
    const std::string path = testing::cli_temp_path("stories260K-q4_0.gguf");
    const testing::CliResult r = testing::run_cli("convert " + target_ + " -o " + path + " --type q4_0");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }

  // A mix: repetitive and plain prompts, greedy and sampled (n = 2), stop strings.
  std::vector<Request> mixed_requests(const Tokenizer& tok) {
    const char* prompts[] = {
        "Once upon a time, there was a little girl. Once upon a time, there was a little",
        "Lily and Tim went to the park. Lily and Tim went to the park. Lily and Tim",
        "The cat sat on the mat.",
        "One day, a boy named Tom found a big red ball. He",
        "Hello",
    };
    std::vector<Request> out;
    for (int i = 0; i < 10; ++i) {
      Request r{.prompt = tok.encode(prompts[i % 5], true), .max_tokens = 12 + (i * 11) % 50};
      if (i % 3 == 2) {
        r.sampling = {.temperature = 0.9f, .top_p = 0.9f, .seed = static_cast<uint64_t>(i)};
        r.n = 2;
      } else {
        r.sampling = {.temperature = 0};
      }
      if (i == 4) r.stop_strings = {"ball"};
      out.push_back(r);
    }
    return out;
  }

  // Runs the requests together; returns tokens per request (in order) and output.
  std::vector<std::map<int, std::vector<int32_t>>> run_all(Engine& e, const std::vector<Request>& reqs) {
    Collector c;
    std::vector<RequestId> ids;
    for (const Request& r : reqs) {
      auto id = e.submit(r, c.callback());
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      ids.push_back(id.ok() ? *id : 0);
    }
    c.wait(static_cast<int>(reqs.size()));
    std::vector<std::map<int, std::vector<int32_t>>> out;
    for (const RequestId id : ids) out.push_back(c.tokens_[id]);
    return out;
  }

  std::string target_;
};

void expect_greedy_identical(const std::vector<Request>& reqs, const std::vector<std::map<int, std::vector<int32_t>>>& a,
                             const std::vector<std::map<int, std::vector<int32_t>>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].sampling.temperature > 0) {
      // Sampled: a different RNG path, but a complete output of the right shape.
      ASSERT_EQ(b[i].size(), static_cast<size_t>(reqs[i].n)) << "request " << i;
      continue;
    }
    EXPECT_EQ(a[i].at(0), b[i].at(0)) << "greedy request " << i;
  }
}

TEST_F(SpeculativeTest, GreedyIsTokenIdenticalWithPromptLookupAloneAndBatched) {
  auto plain = make({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256});
  auto spec = make({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256, .speculative = "lookup"});
  ASSERT_TRUE(plain && spec);
  EXPECT_NE(spec->speculative_summary().find("prompt lookup"), std::string::npos);
  const std::vector<Request> reqs = mixed_requests(spec->tokenizer());
  // Alone: one request at a time.
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<Request> one = {reqs[i]};
    expect_greedy_identical(one, run_all(*plain, one), run_all(*spec, one));
  }
  // Batched.
  expect_greedy_identical(reqs, run_all(*plain, reqs), run_all(*spec, reqs));
  const EngineStats s = spec->stats();
  EXPECT_GT(s.spec_drafted, 0);
  EXPECT_GT(s.spec_accepted, 0);
  EXPECT_LT(s.spec_accepted, s.spec_drafted);
  EXPECT_GT(s.spec_tokens_per_pass(), 1.0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(plain->stats().spec_drafted, 0);

  // A request may opt out: the same engine then drafts nothing for it.
  std::vector<Request> opted = {reqs[0]};
  opted[0].speculative = false;
  const int64_t drafted = spec->stats().spec_drafted;
  expect_greedy_identical(opted, run_all(*plain, opted), run_all(*spec, opted));
  EXPECT_EQ(spec->stats().spec_drafted, drafted);
}

TEST_F(SpeculativeTest, GreedyIsTokenIdenticalWithDraftModels) {
  auto plain = make({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256});
  ASSERT_TRUE(plain);
  const std::vector<Request> reqs = mixed_requests(plain->tokenizer());
  const auto want = run_all(*plain, reqs);
  // The model drafting for itself (every draft accepted), then its Q4_0 copy.
  for (const std::string& draft : {target_, q4_copy()}) {
    SCOPED_TRACE(draft);
    auto spec = make({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256, .speculative = "draft",
                      .draft_model_path = draft, .spec_max_draft = 4});
    ASSERT_TRUE(spec);
    expect_greedy_identical(reqs, want, run_all(*spec, reqs));
    const std::vector<Request> one = {reqs[0]};
    expect_greedy_identical(one, run_all(*plain, one), run_all(*spec, one));
    const EngineStats s = spec->stats();
    EXPECT_GT(s.spec_accepted, 0);
    if (draft == target_) {
      EXPECT_GT(s.spec_acceptance_rate(), 0.9);  // sampled requests may still reject
    } else {
      EXPECT_LT(s.spec_accepted, s.spec_drafted);
    }
    EXPECT_EQ(s.kv_blocks_used, 0);
  }
}

// A routed target: drafts verified by the mixture-of-experts model (prompt
// lookup, and the dense stories260K, which shares its vocabulary, as the draft).
TEST_F(SpeculativeTest, GreedyIsTokenIdenticalForAMixtureOfExpertsTarget) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  auto make_moe = [&](EngineConfig cfg) {
    cfg.model_path = moe;
    cfg.n_threads = 2;
    cfg.check_invariants = true;
    auto e = Engine::create(cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  };
  auto plain = make_moe({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256});
  ASSERT_TRUE(plain);
  const std::vector<Request> reqs = mixed_requests(plain->tokenizer());
  const auto want = run_all(*plain, reqs);
  for (const std::string mode : {"lookup", "draft"}) {
    SCOPED_TRACE(mode);
    auto spec = make_moe({.max_batch_tokens = 128, .max_seqs = 16, .ctx_size = 256, .speculative = mode,
                          .draft_model_path = mode == "draft" ? target_ : ""});
    ASSERT_TRUE(spec);
    expect_greedy_identical(reqs, want, run_all(*spec, reqs));
    EXPECT_GT(spec->stats().spec_drafted, 0);
    EXPECT_EQ(spec->stats().kv_blocks_used, 0);
  }
}

TEST_F(SpeculativeTest, SampledSecondTokenKeepsTheTargetDistribution) {
  // Three tokens per request: the first comes from the prompt's pass, the second
  // from verifying a one-token draft (the third is the bonus or next step). Its frequencies, given the most common first token,
  // must match the target's exact conditional distribution.
  auto spec = make({.max_batch_tokens = 512, .max_seqs = 64, .ctx_size = 64, .speculative = "draft",
                    .draft_model_path = q4_copy(), .spec_max_draft = 3, .spec_adaptive = false},
                   /*check=*/false);
  ASSERT_TRUE(spec);
  const Tokenizer& tok = spec->tokenizer();
  const std::vector<int32_t> prompt = tok.encode("Once upon a time, there was a little", true);
  const SamplingParams params{.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0, .repeat_penalty = 1.2f};
  const int n = 3000;
  Collector c;
  for (int i = 0; i < n; ++i) {
    SamplingParams p = params;
    p.seed = 100 + static_cast<uint64_t>(i);
    ASSERT_TRUE(spec->submit(Request{.prompt = prompt, .max_tokens = 3, .sampling = p, .ignore_eos = true},
                             c.callback())
                    .ok());
    if (i % 256 == 255) c.wait(i + 1 - 128);  // keep the queue bounded
  }
  c.wait(n);
  EXPECT_GT(spec->stats().spec_drafted, n / 2);

  std::map<int32_t, int64_t> first_counts;
  for (auto& [id, outs] : c.tokens_) first_counts[outs[0].at(0)]++;
  int32_t given = -1;
  for (auto& [t, k] : first_counts)
    if (given < 0 || k > first_counts[given]) given = t;
  std::vector<int64_t> second(static_cast<size_t>(tok.n_vocab()));
  int64_t n_given = 0;
  for (auto& [id, outs] : c.tokens_) {
    if (outs[0].at(0) != given) continue;
    ASSERT_EQ(outs[0].size(), 3u);
    ++second[static_cast<size_t>(outs[0][1])];
    ++n_given;
  }
  ASSERT_GT(n_given, 300);

  // The exact conditional: the target's sampler after prompt + given.
  auto mf = open_model_file(target_);
  ASSERT_TRUE(mf.ok());
  auto model = Model::load(std::make_shared<const ModelFile>(std::move(*mf)), ModelOptions{.n_threads = 1});
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> ctx = prompt;
  ctx.push_back(given);
  KvCache kv = (*model)->make_kv_cache(static_cast<int64_t>(ctx.size()) + 1);
  std::vector<float> logits(static_cast<size_t>(tok.n_vocab())), probs(logits.size());
  ASSERT_TRUE((*model)->forward(ctx, kv, logits.data(), false).ok());
  Sampler s(params, tok.n_vocab());
  for (const int32_t t : ctx) s.accept(t);
  s.distribution(logits.data(), probs.data());

  std::vector<double> p(probs.begin(), probs.end());
  EXPECT_LE(spec::testing::chi_square_excess(second, p, n_given), 0.0)
      << "second-token frequencies differ from the target's (" << n_given << " samples)";
}

TEST_F(SpeculativeTest, RefusesBadConfigurations) {
  EngineConfig c{.model_path = target_, .speculative = "magic"};
  EXPECT_FALSE(Engine::create(c).ok());
  c.speculative = "draft";
  EXPECT_FALSE(Engine::create(c).ok());  // no draft model
  c.draft_model_path = "/nonexistent.gguf";
  EXPECT_FALSE(Engine::create(c).ok());
  c.speculative = "lookup";
  c.spec_max_draft = 0;
  EXPECT_FALSE(Engine::create(c).ok());
  c.spec_max_draft = 4;
  c.spec_ngram_max = 0;
  EXPECT_FALSE(Engine::create(c).ok());
  c = EngineConfig{.model_path = target_, .draft_model_path = target_};
  auto off = Engine::create(c);
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("speculative decoding is off"), std::string::npos);
}

TEST_F(SpeculativeTest, CliRunAndBenchSpec) {
  const std::string prompt = " -p 'Lily and Tim went to the park. Lily and Tim went to the park. Lily and Tim'";
  const testing::CliResult plain = testing::run_cli("run -m " + target_ + prompt + " -n 24 --temp 0 --json");
  const testing::CliResult spec =
      testing::run_cli("run -m " + target_ + prompt + " -n 24 --temp 0 --json --spec lookup --draft-max 4");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["tokens"], nlohmann::json::parse(spec.out)["tokens"]);
  EXPECT_NE(spec.err.find("prompt lookup"), std::string::npos) << spec.err;
  EXPECT_NE(spec.err.find("speculative:"), std::string::npos) << spec.err;

  const testing::CliResult draft =
      testing::run_cli("run -m " + target_ + prompt + " -n 24 --temp 0 --json --draft-model " + target_);
  ASSERT_EQ(draft.exit_code, 0) << draft.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["tokens"], nlohmann::json::parse(draft.out)["tokens"]);

  const testing::CliResult b =
      testing::run_cli("bench-spec -m " + target_ + " --spec lookup -n 24 -r 2 -t 1 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json j = nlohmann::json::parse(b.out);
  for (const char* key : {"plain_tps", "spec_tps", "ratio", "acceptance", "tokens_per_pass", "drafted_per_run"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_GT(j["plain_tps"].get<double>(), 0.0);
  EXPECT_GT(j["spec_tps"].get<double>(), 0.0);
  EXPECT_EQ(j["greedy_identical"], true);

  const testing::CliResult none = testing::run_cli("bench-spec -m " + target_ + " -n 8");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--spec lookup or --draft-model"), std::string::npos) << none.err;
  const testing::CliResult bad = testing::run_cli("run -m " + target_ + " -p hi --spec maybe");
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace sluice
