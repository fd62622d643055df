// replay_routing with arrival times: prefetches land at the disk rate, so a
// prediction issued one layer ahead is ready only if the disk is faster than
// the layer's compute; without a rate every prefetch lands at once.
#include "weights/expert_replay.h"

#include <gtest/gtest.h>

namespace sluice::weights {
namespace {

// 2 routed layers of 4 experts (top 1); at step s both choose expert s % 4,
// and the prediction names exactly it.
RoutingTrace perfect_trace(int n_steps) {
  RoutingTrace t{.n_layer = 2, .n_expert = 4, .n_used = 1};
  for (int s = 0; s < n_steps; ++s) {
    std::vector<RoutingTrace::Layer> step(2);
    for (auto& l : step) l = {.chosen = {s % 4}, .predicted = {s % 4}};
    t.steps.push_back(step);
  }
  return t;
}

void expect_adds_up(const std::vector<ExpertLayerStats>& layers) {
  for (size_t l = 0; l < layers.size(); ++l)
    EXPECT_EQ(layers[l].ready + layers[l].late + layers[l].missed, layers[l].chosen) << "layer " << l;
}

TEST(ExpertReplay, WithoutADiskRateEveryPrefetchIsReady) {
  const auto r = replay_routing(perfect_trace(8), {.n_slots = 8});
  expect_adds_up(r);
  for (const ExpertLayerStats& l : r) {
    EXPECT_EQ(l.ready, 8u);
    EXPECT_EQ(l.late, 0u);
    EXPECT_EQ(l.late_s, 0.0);
    EXPECT_EQ(l.prefetch_reads, 4u);  // the last four steps find their expert kept
  }
}

// A read takes 1 s, a layer computes for 0.1 s: each first prediction is late.
//   step 0, layer 0: predicted and routed at t=0; lands at 1.0 (late 1.0);
//                    computes 1.0 .. 1.1
//   step 0, layer 1: predicted at 1.0 (layer 0 began computing), lands at
//                    2.0; routed at 1.1 (late 0.9); computes 2.0 .. 2.1
TEST(ExpertReplay, ASlowDiskMakesPrefetchesLateByTheReadTimeLeft) {
  const auto r = replay_routing(perfect_trace(1),
                                {.n_slots = 8, .disk_bytes_per_s = 1e6, .expert_bytes = 1'000'000, .layer_s = 0.1});
  expect_adds_up(r);
  EXPECT_EQ(r[0].late, 1u);
  EXPECT_NEAR(r[0].late_s, 1.0, 1e-9);
  EXPECT_EQ(r[1].late, 1u);
  EXPECT_NEAR(r[1].late_s, 0.9, 1e-9);
  EXPECT_NEAR(r[1].late_max_s, 0.9, 1e-9);
  EXPECT_NEAR(r[1].late_mean_ms(), 900.0, 1e-6);
}

// A read takes 10 ms, a layer 1 s: layer 1's prefetch, issued as layer 0
// computes, lands in time; layer 0's, issued when the step's token is known,
// cannot (it routes at once) until its expert is kept in a slot.
TEST(ExpertReplay, AFastDiskHidesPrefetchesBehindThePreviousLayer) {
  const auto r = replay_routing(perfect_trace(8),
                                {.n_slots = 8, .disk_bytes_per_s = 1e6, .expert_bytes = 10'000, .layer_s = 1.0});
  expect_adds_up(r);
  EXPECT_EQ(r[1].ready, 8u);
  EXPECT_EQ(r[0].late, 4u);  // the first four steps; the last four find their expert kept
  EXPECT_EQ(r[0].ready, 4u);
  EXPECT_NEAR(r[0].late_s, 4 * 0.01, 1e-9);
}

// A prediction the routing did not choose, still queued behind a slow read,
// is dropped (cancelled) and leaves no expert behind.
TEST(ExpertReplay, UnchosenQueuedPrefetchesAreCancelled) {
  RoutingTrace t{.n_layer = 1, .n_expert = 4, .n_used = 1};
  t.steps.push_back({{.chosen = {0}, .predicted = {1, 2}}});
  t.steps.push_back({{.chosen = {2}, .predicted = {}}});
  const auto r = replay_routing(t, {.n_slots = 4, .disk_bytes_per_s = 1e6, .expert_bytes = 1'000'000, .layer_s = 0.1});
  expect_adds_up(r);
  // Step 0: 1 is reading, 2 queued: 2 is dropped; 0 is read on demand.
  EXPECT_EQ(r[0].cancelled, 1u);
  EXPECT_EQ(r[0].missed, 2u);  // 0 at step 0, then 2 (its prefetch was dropped)
  EXPECT_EQ(r[0].ready, 0u);
}

}  // namespace
}  // namespace sluice::weights
