// Expert prediction and caching judged on a real trained MoE's routing
// (stories-moe: 16 experts, top-2, learned, near-balanced routing). With room
// for 4 of 16 experts per layer, as the weight store runs it:
//   - the predictor recalls at least 80% of the chosen experts at layers 1-3,
//   - the disk reads at most 1.5 experts per chosen expert there,
//   - experts ready when their layer routes are at least 2.5x plain LRU's hits.
#include <gtest/gtest.h>

#include "base/test_data.h"
#include "runtime/load_model.h"
#include "runtime/routing_trace.h"

namespace sluice {
namespace {

TEST(ExpertPrediction, StoriesMoeRecallReadsAndReadinessAgainstLru) {
  const std::string path = testing::shipped_model_path("stories-moe-f16.gguf");
  auto lm = load_model(path, {.n_threads = 2, .n_batch = 1, .predict_experts = true});
  ASSERT_TRUE(lm.ok()) << lm.status().to_string();
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : {"Once upon a time", "One day", "Lily", "Tom and", "The sun was", "A little bird"})
    prompts.push_back(lm->tokenizer->encode(p, true));
  auto trace = record_routing(*lm->model, prompts, 80);
  ASSERT_TRUE(trace.ok()) << trace.status().to_string();
  const auto lru = weights::replay_routing(*trace, {.n_slots = 16, .policy = weights::CachePolicy::kLru,
                                                    .use_prediction = false});
  const auto ours = weights::replay_routing(*trace, {.n_slots = 16});
  std::printf("LRU:\n%s\nusage + prediction:\n%s", weights::replay_table(lru, static_cast<int64_t>(trace->steps.size())).c_str(),
              weights::replay_table(ours, static_cast<int64_t>(trace->steps.size())).c_str());
  for (int l = 1; l <= 3; ++l) {
    EXPECT_GE(ours[static_cast<size_t>(l)].recall(), 0.80) << "layer " << l;
    EXPECT_LE(ours[static_cast<size_t>(l)].read_ratio(), 1.5) << "layer " << l;
  }
  EXPECT_GE(weights::replay_total(ours).hit_rate(), 2.5 * weights::replay_total(lru).hit_rate());
  // Without prediction every hit is one the cache kept; with it, the
  // read-ahead's hits are ready but not kept.
  EXPECT_EQ(weights::replay_total(lru).kept, weights::replay_total(lru).ready);
  EXPECT_LT(weights::replay_total(ours).kept, weights::replay_total(ours).ready);
}

}  // namespace
}  // namespace sluice
