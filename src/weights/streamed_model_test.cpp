// The model computes the same tokens with weights streamed through the weight
// store as with every weight resident.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "model/generate.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/sampler.h"
#include "weights/store_source.h"
#include "weights/weights_test_util.h"

namespace sluice::weights {
namespace {

std::vector<int32_t> greedy(const std::shared_ptr<const ModelFile>& file, std::shared_ptr<LayerWeightSource> source,
                            const std::vector<int32_t>& prompt, int n) {
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .weights = std::move(source)});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(prompt.size()) + n);
  Sampler s(SamplingParams{.temperature = 0}, static_cast<int32_t>((*m)->hparams().n_vocab));
  auto r = generate(**m, kv, prompt, s, GenerateParams{.stop = {.max_tokens = n}});
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

TEST(StreamedModel, SameTokensAsResidentAndCountsBytes) {
  auto file = testing::small_synth_model("streamed_model.gguf", 8, 3);
  ASSERT_NE(file, nullptr);
  const std::vector<int32_t> prompt = {1, 300, 301, 302, 500, 77};
  const auto resident = greedy(file, nullptr, prompt, 24);

  auto layout = plan_placement(*file, {});
  ASSERT_TRUE(layout.ok());
  // Essentials plus three layer slots: most layers must stream.
  uint64_t slot = 0;
  for (const LayerPlacement& l : layout->layers) slot = std::max(slot, l.extent_bytes);
  const uint64_t budget = layout->essentials_bytes + 3 * slot + 4096;
  auto setup = open_streaming(file, StreamingOptions{.mem_budget_bytes = budget, .n_threads = 2,
                                                      .direct = testing::dir_supports_direct(testing::scratch_dir())});
  ASSERT_TRUE(setup.ok()) << setup.status().to_string();
  EXPECT_GT(setup->source->store().plan().n_streamed, 0);
  EXPECT_EQ(greedy(file, setup->source, prompt, 24), resident);
  const WeightCountersSnapshot c = setup->source->store().counters();
  EXPECT_GT(c.disk_read_bytes, 0u);
  EXPECT_GT(c.n_tokens, 0u);
  EXPECT_LT(c.resident_fraction(), 1.0);
}

// Streaming's memory probes stay within the budget (floored at 32 MiB) and
// within the model's own layers; plan --measure's (no cap) sweep the span.
TEST(StreamedModel, ProbesStayWithinTheBudget) {
  ModelFile f;
  f.format = "gguf";
  uint64_t blocks = 0;
  for (int l = 0; l < 40; ++l) {
    for (const char* name : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
      TensorInfo t;
      t.name = fmt::format("blk.{}.{}.weight", l, name);
      t.type = DType::kQ8_0;
      const bool down = std::string(name) == "ffn_down";
      t.ne = {down ? 8192 : 2048, down ? 2048 : (std::string(name).rfind("ffn", 0) == 0 ? 8192 : 2048)};
      t.n_bytes = static_cast<uint64_t>(t.ne[0] * t.ne[1]) / 32 * 34;
      blocks += t.n_bytes;
      f.tensors.push_back(t);
    }
  }
  ASSERT_GT(blocks, plan::memory_span_bytes());  // ~3.9 GB of layers
  const plan::CalibrateOptions open = probe_options_for_model(f, 1);
  EXPECT_EQ(open.weight_read_bytes, plan::memory_span_bytes());
  EXPECT_EQ(open.mem_bytes, plan::memory_span_bytes());
  EXPECT_FALSE(open.probe_disk);
  const plan::CalibrateOptions budget = probe_options_for_model(f, 1, 100u << 20);
  EXPECT_EQ(budget.weight_read_bytes, 100u << 20);
  EXPECT_EQ(budget.mem_bytes, 100u << 20);
  const plan::CalibrateOptions tiny = probe_options_for_model(f, 1, 1000);
  EXPECT_EQ(tiny.weight_read_bytes, 32u << 20);
  EXPECT_EQ(tiny.mem_bytes, 32u << 20);
}

TEST(StreamedModel, RefusesABudgetThatCannotHoldTheRing) {
  auto file = testing::small_synth_model("streamed_model_small.gguf", 4, 3);
  ASSERT_NE(file, nullptr);
  auto r = open_streaming(file, StreamingOptions{.mem_budget_bytes = 1000});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace sluice::weights
