// The serving engine with weights streamed under a memory budget gives the same
// greedy tokens as with every weight resident, for concurrent requests.
#include <condition_variable>
#include <map>
#include <mutex>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/metrics.h"
#include "base/test_data.h"
#include "model/synth.h"
#include "sluice/engine.h"
#include "weights/placement.h"
#include "weights/weights_test_util.h"

namespace sluice {
namespace {

std::map<RequestId, std::vector<int32_t>> run_all(Engine& e, int n) {
  std::mutex mu;
  std::condition_variable cv;
  std::map<RequestId, std::vector<int32_t>> out;
  int done = 0;
  for (int i = 0; i < n; ++i) {
    Request r{.prompt = {1, 300 + i, 301, 302 + 2 * i}, .max_tokens = 12 + i, .sampling = {.temperature = 0},
              .ignore_eos = true};
    auto id = e.submit(r, [&](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) out[ev.request].push_back(ev.token);
      if (ev.timings) {
        ++done;
        cv.notify_all();
      }
    });
    EXPECT_TRUE(id.ok());
  }
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == n; }));
  return out;
}

TEST(StreamedEngine, SameTokensAsResidentForConcurrentRequests) {
  const std::string path = weights::testing::scratch_dir() + "/streamed_engine.gguf";
  SynthShape shape{.name = "s", .n_vocab = 1024, .n_embd = 256, .n_layer = 8, .n_head = 8, .n_head_kv = 4,
                   .n_ff = 768, .n_ctx = 256};
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "q4_0", .seed = 5, .n_threads = 2}, path).ok());
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok());
  auto layout = weights::plan_placement(*mf, {});
  ASSERT_TRUE(layout.ok());
  uint64_t slot = 0;
  for (const auto& l : layout->layers) slot = std::max(slot, l.extent_bytes);

  EngineConfig cfg{.model_path = path, .n_threads = 2, .max_seqs = 4, .ctx_size = 64, .check_invariants = true};
  auto resident = Engine::create(cfg);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  const auto want = run_all(**resident, 4);
  resident->reset();

  cfg.mem_budget_bytes = layout->essentials_bytes + 3 * slot + 4096;
  auto streamed = Engine::create(cfg);
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  EXPECT_NE((*streamed)->placement_report().find("ring"), std::string::npos);
  const auto got = run_all(**streamed, 4);
  ASSERT_EQ(got.size(), want.size());
  for (auto& [id, toks] : want) EXPECT_EQ(got.at(id), toks) << "request " << id;
}

// A routed model with its experts streamed one by one through the engine:
// the same tokens, and the per-layer expert figures in the engine's report,
// its JSON and the metric registry (what /metrics serves).
TEST(StreamedEngine, MixtureOfExpertsStreamsExpertByExpert) {
  const std::string path = testing::shipped_model_path("stories-moe-f16.gguf");
  EngineConfig cfg{.model_path = path, .n_threads = 2, .max_seqs = 4, .ctx_size = 64, .check_invariants = true};
  auto resident = Engine::create(cfg);
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  const auto want = run_all(**resident, 4);
  resident->reset();

  cfg.mem_budget_bytes = 1'500'000;  // of its 2.6 MB
  auto streamed = Engine::create(cfg);
  ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
  EXPECT_NE((*streamed)->placement_report().find("experts: a pool of"), std::string::npos) << (*streamed)->placement_report();
  const auto got = run_all(**streamed, 4);
  for (auto& [id, toks] : want) EXPECT_EQ(got.at(id), toks) << "request " << id;
  EXPECT_NE((*streamed)->weights_report().find("recall"), std::string::npos);
  const auto j = nlohmann::json::parse((*streamed)->weights_json());
  EXPECT_GT(j["experts"]["recall"].get<double>(), 0.5);
  streamed->reset();  // the last figures are published as the engine stops
  EXPECT_GT(global_metrics().value("sluice_expert_recall", "layer=\"1\""), 0.5);
}

}  // namespace
}  // namespace sluice
