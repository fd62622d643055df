// The per-token hot path allocates nothing: a decode step (forward pass of one
// token, and of a small batch of sequences) performs no heap allocation once
// the model and its KV cache exist.

#include <gtest/gtest.h>

#include "base/alloc_count_test_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "sample/sampler.h"

namespace sluice {
namespace {

using testing::g_allocations;
using testing::g_counting;

TEST(NoAllocation, DecodeStepsAndBatchedStepsDoNotAllocate) {
  const std::string path = ::testing::TempDir() + "/no_alloc_model.gguf";
  SynthShape shape{.name = "s", .n_vocab = 512, .n_embd = 256, .n_layer = 2, .n_head = 8, .n_head_kv = 4,
                   .n_ff = 512, .n_ctx = 512};
  for (const std::string type : {"q8_0", "f16", "q4_k"}) {
    ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = type, .seed = 1, .n_threads = 2}, path).ok());
    auto mf = open_model_file(path);
    ASSERT_TRUE(mf.ok());
    auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                              ModelOptions{.n_threads = 2, .n_batch = 64, .n_ctx_max = 512, .max_seqs = 4});
    ASSERT_TRUE(m.ok());
    Model& model = **m;
    KvCache kv = model.make_kv_cache(400);
    std::vector<float> logits(static_cast<size_t>(4 * model.hparams().n_vocab));
    Sampler sampler(SamplingParams{.temperature = 0.7f, .seed = 3}, static_cast<int32_t>(model.hparams().n_vocab));
    const std::vector<int32_t> prompt(300, 7);  // long enough for split-KV attention
    ASSERT_TRUE(model.forward(prompt, kv, logits.data(), false).ok());

    // Four sequences in one step over a shared block table.
    const std::vector<int32_t> toks = {5, 6, 7, 8};
    std::vector<ForwardSeq> seqs;
    for (int i = 0; i < 4; ++i)
      seqs.push_back(ForwardSeq{.tokens = std::span(&toks[static_cast<size_t>(i)], 1), .pos0 = 300 + i,
                                .block_table = kv.block_table(), .n_logits = 1});

    g_allocations = 0;
    g_counting = true;
    int32_t tok = 9;
    for (int i = 0; i < 8; ++i) {
      const int32_t one[1] = {tok};
      if (!model.forward(one, kv, logits.data(), false).ok()) break;
      tok = sampler.sample(logits.data());
      sampler.accept(tok);
    }
    const bool batched_ok = model.forward(seqs, kv.store(), logits.data()).ok();
    g_counting = false;
    EXPECT_TRUE(batched_ok);
    EXPECT_EQ(g_allocations.load(), 0) << "heap allocations in the decode hot path (" << type << ")";
  }
}

// A routed model with its routing counted (model/expert_feed.h), predicted
// or not (then through Backend::routed_ffn, counted at the stage's end):
// prediction, routing, counters and the experts' FFN allocate nothing either,
// and every token's choices are counted.
TEST(NoAllocation, RoutedDecodeStepsDoNotAllocate) {
  const std::string path = ::testing::TempDir() + "/no_alloc_moe.gguf";
  SynthShape shape{.name = "s", .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                   .n_ff = 256, .n_ctx = 256, .arch = "qwen2moe", .n_expert = 8, .n_expert_used = 2,
                   .n_ff_expert = 64, .n_ff_shared = 128};
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "q8_0", .seed = 1, .n_threads = 2}, path).ok());
  for (const bool predict : {true, false}) {
    SCOPED_TRACE(predict ? "predicted" : "not predicted");
    auto mf = open_model_file(path);
    ASSERT_TRUE(mf.ok());
    auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                         ModelOptions{.n_threads = 2, .n_batch = 64, .n_ctx_max = 256, .max_seqs = 4,
                                      .predict_experts = predict});
    ASSERT_TRUE(m.ok()) << m.status().message();
    Model& model = **m;
    std::vector<Counter> counters(static_cast<size_t>(shape.n_layer * shape.n_expert));
    std::vector<Counter*> counter_ptrs;
    for (Counter& c : counters) counter_ptrs.push_back(&c);
    model.set_routing_counters(counter_ptrs);
    KvCache kv = model.make_kv_cache(200);
    std::vector<float> logits(static_cast<size_t>(model.hparams().n_vocab));
    const std::vector<int32_t> prompt(40, 7);
    ASSERT_TRUE(model.forward(prompt, kv, logits.data(), false).ok());

    g_allocations = 0;
    g_counting = true;
    bool ok = true;
    for (int32_t tok = 9; ok && tok < 17; ++tok) {
      const int32_t one[1] = {tok};
      ok = model.forward(one, kv, logits.data(), false).ok();
    }
    g_counting = false;
    EXPECT_TRUE(ok);
    EXPECT_EQ(g_allocations.load(), 0) << "heap allocations in a routed decode step";
    double routed = 0;
    for (const Counter& c : counters) routed += c.value();
    EXPECT_EQ(routed, static_cast<double>((40 + 8) * shape.n_layer * shape.n_expert_used));
  }
}

}  // namespace
}  // namespace sluice
