// A routed layer through Backend::routed_ffn when the backend keeps the
// routing on its device (the CUDA backend): the ids reach the host only at
// the backend's next wait_idle(). The model's routing counts and logits must
// be those of a backend that hands the ids over at once, so nothing may read
// them before ExpertFeed's end of stage.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/reference_backend.h"
#include "base/metrics.h"
#include "model/model.h"
#include "model/synth.h"

namespace sluice {
namespace {

// The reference kernels, with routed_ffn's ids and weights held back until
// wait_idle(); meanwhile the caller's arrays hold a wrong, valid routing
// (expert 0 everywhere), so an early read miscounts.
class LateRouting final : public ReferenceBackend {
 public:
  void routed_ffn(const RouteArgs& r, const ExpertFfnArgs& e) override {
    ++calls;
    const auto n = static_cast<size_t>(r.n_tok * r.n_used);
    Held h{std::vector<int32_t>(n), std::vector<float>(n), r.ids, r.weights};
    RouteArgs mine = r;
    mine.ids = h.ids.data();
    mine.weights = h.weights.data();
    route(mine);
    ExpertFfnArgs ffn = e;
    ffn.ids = mine.ids;
    ffn.weights = mine.weights;
    expert_ffn(ffn);
    std::fill(r.ids, r.ids + n, 0);
    std::fill(r.weights, r.weights + n, 0.0f);
    held.push_back(std::move(h));
  }
  void wait_idle() override {
    ++waits;
    for (const Held& h : held) {
      std::memcpy(h.dst_ids, h.ids.data(), h.ids.size() * sizeof(int32_t));
      std::memcpy(h.dst_weights, h.weights.data(), h.weights.size() * sizeof(float));
    }
    held.clear();
  }

  int calls = 0, waits = 0;

 private:
  struct Held {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    int32_t* dst_ids;
    float* dst_weights;
  };
  std::vector<Held> held;
};

struct Outcome {
  std::vector<float> logits;   // every step's
  std::vector<double> counts;  // [n_layer * n_expert]
};

Outcome run(const std::string& path, std::shared_ptr<Backend> be, int64_t n_counters) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                       ModelOptions{.n_threads = 1, .n_batch = 32, .n_ctx_max = 128, .backend = std::move(be)});
  EXPECT_TRUE(m.ok()) << m.status().message();
  Model& model = **m;
  std::vector<Counter> counters(static_cast<size_t>(n_counters));
  std::vector<Counter*> ptrs;
  for (Counter& c : counters) ptrs.push_back(&c);
  model.set_routing_counters(ptrs);
  KvCache kv = model.make_kv_cache(100);
  Outcome r;
  std::vector<float> logits(static_cast<size_t>(model.hparams().n_vocab));
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + 7 * i % 200);
  EXPECT_TRUE(model.forward(prompt, kv, logits.data(), false).ok());
  r.logits = logits;
  for (int32_t tok = 5; tok < 10; ++tok) {
    const int32_t one[1] = {tok};
    EXPECT_TRUE(model.forward(one, kv, logits.data(), false).ok());
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  }
  for (const Counter& c : counters) r.counts.push_back(c.value());
  return r;
}

TEST(RoutedFfn, RoutingHandedOverAtTheNextWaitCountsAndComputesAsAtOnce) {
  const std::string path = ::testing::TempDir() + "/routed_ffn_moe.gguf";
  const SynthShape shape{.name = "s", .n_vocab = 256, .n_embd = 64, .n_layer = 3, .n_head = 4, .n_head_kv = 2,
                         .n_ff = 128, .n_ctx = 128, .arch = "qwen2moe", .n_expert = 8, .n_expert_used = 2,
                         .n_ff_expert = 32, .n_ff_shared = 64};
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "f32", .seed = 3, .n_threads = 1}, path).ok());
  const int64_t n_counters = shape.n_layer * shape.n_expert;
  auto late = std::make_shared<LateRouting>();
  const Outcome at_once = run(path, std::make_shared<ReferenceBackend>(), n_counters);
  const Outcome held = run(path, late, n_counters);
  EXPECT_GT(late->calls, 0) << "the routed layers did not go through routed_ffn";
  EXPECT_GE(late->waits, 6) << "a wait at least once a step";
  EXPECT_EQ(at_once.logits, held.logits);
  EXPECT_EQ(at_once.counts, held.counts);
  double total = 0;
  for (double c : held.counts) total += c;
  EXPECT_EQ(total, static_cast<double>((20 + 5) * shape.n_layer * shape.n_expert_used));
}

}  // namespace
}  // namespace sluice
