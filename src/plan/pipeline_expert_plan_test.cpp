#include "plan/pipeline_expert_plan.h"

#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

// 4 layers, each 1 MiB beside its 8 experts of 1 MiB (the last layer dense,
// 3 MiB); a 2 MiB head. Ranks alike, 1 GiB each unless told.
PipelineExpertInputs inputs(int n_ranks, int64_t ep_size, uint64_t mem_cap = 1ull << 30) {
  PipelineExpertInputs in;
  in.ep_size = ep_size;
  in.experts = {.n_expert = 8, .n_expert_used = 2, .n_embd = 64, .n_routed_layers = 3, .expert_bytes = 1 << 20,
                .expert_flops = 2e6, .dense_bytes = 8 << 20};
  for (int l = 0; l < 4; ++l) {
    const bool routed = l < 3;
    in.routed.push_back(routed ? 1 : 0);
    in.layers.layer_bytes.push_back(routed ? 9u << 20 : 3u << 20);
    in.layers.layer_flops_per_token.push_back(routed ? 2e6 + 2 * 2e6 : 6e6);
  }
  in.layers.head_bytes = 2 << 20;
  in.layers.head_read_bytes = 1 << 20;
  in.layers.head_flops_per_token = 2e6;
  in.layers.n_embd = 64;
  for (int r = 0; r < n_ranks; ++r) {
    in.ranks.push_back({.host = "h", .mem_cap_bytes = mem_cap, .read_gbps = 10, .tflops = 0.1, .n_threads = 1});
    in.links.push_back({.latency_s = r ? 50e-6 : 0.0, .gbps = r ? 1.0 : 0.0});
  }
  return in;
}

TEST(PipelineExpertPlan, StagesCutTheLayersAndSplitTheirExperts) {
  StatusOr<PipelineExpertPlan> p = plan_pipeline_experts(inputs(4, 2));
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->n_stages(), 2);
  EXPECT_EQ(p->rank_of(1, 0), 2);
  EXPECT_EQ(p->rank_of(1, 1), 3);
  const LayerRange a = p->pipeline.ranges[0], b = p->pipeline.ranges[1];
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(a.end, b.begin);
  EXPECT_EQ(b.end, 4);
  int64_t routed_seen = 0;
  for (int64_t g = 0; g < 2; ++g) {
    const ExpertParallelPlan& e = p->stages[static_cast<size_t>(g)];
    const LayerRange r = p->pipeline.ranges[static_cast<size_t>(g)];
    int64_t routed = 0;
    for (int64_t l = r.begin; l < r.end; ++l) routed += l < 3 ? 1 : 0;
    EXPECT_EQ(e.in.n_routed_layers, routed);
    routed_seen += routed;
    ASSERT_EQ(e.n_ranks(), 2);
    EXPECT_EQ(e.shares[0].begin, 0);
    EXPECT_EQ(e.shares[0].end, 4);
    EXPECT_EQ(e.shares[1].end, 8);
    // The member holds its share of the stage's routed layers alone; the
    // lead, the stage's non-expert part beside its share (stage 0: the head).
    EXPECT_EQ(e.rank_bytes[1], static_cast<uint64_t>(4 * routed) << 20);
    uint64_t dense = g == 0 ? 2u << 20 : 0;
    for (int64_t l = r.begin; l < r.end; ++l) dense += l < 3 ? 1u << 20 : 3u << 20;
    EXPECT_EQ(e.rank_bytes[0], dense + (static_cast<uint64_t>(4 * routed) << 20));
    // The lead's share is what the cut counted for it.
    EXPECT_EQ(p->pipeline.range_bytes[static_cast<size_t>(g)], e.rank_bytes[0]);
  }
  EXPECT_EQ(routed_seen, 3);
  // A step: each stage's experts plan plus the hops between the stages.
  double sum = 0;
  for (const ExpertParallelPlan& e : p->stages) sum += e.step_s(1);
  EXPECT_NEAR(p->step_s(1), sum + p->pipeline.hop_s(0, 1) + p->pipeline.hop_s(1, 1), 1e-12);
  EXPECT_GT(p->network_s(1), p->pipeline.hop_s(1, 1));
  EXPECT_LT(p->network_s(1), p->step_s(1));
}

TEST(PipelineExpertPlan, OneRankPerStageIsAPipelineOfWholeExperts) {
  StatusOr<PipelineExpertPlan> p = plan_pipeline_experts(inputs(2, 1));
  ASSERT_TRUE(p.ok()) << p.status().message();
  for (const ExpertParallelPlan& e : p->stages) {
    ASSERT_EQ(e.n_ranks(), 1);
    EXPECT_EQ(e.shares[0].end, 8);
  }
}

TEST(PipelineExpertPlan, Refusals) {
  auto refused = [](const PipelineExpertInputs& in, const std::string& why) {
    StatusOr<PipelineExpertPlan> p = plan_pipeline_experts(in);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find(why), std::string::npos) << p.status().message();
  };
  refused(inputs(3, 2), "3 ranks cannot be pipeline stages of --ep-size 2 ranks each");
  refused(inputs(4, 0), "--ep-size must be at least 1");
  refused(inputs(10, 2), "5 stages (10 ranks / --ep-size 2) for 4 layers");
  refused(inputs(2, 16), "2 ranks cannot be pipeline stages");
  refused(inputs(18, 9), "--ep-size 9 for 8 experts");
  PipelineExpertInputs dense = inputs(4, 2);
  dense.experts.n_expert = 0;
  refused(dense, "--parallel pp,ep needs a mixture-of-experts model");
  // 4 stages of one layer each: the last holds the dense layer alone.
  refused(inputs(8, 2), "stage 3 (layers 3-3) holds no routed layer");
  // 16 MiB: the leads hold layers 0-1 with the head (12 MiB) and 2-3 (8
  // MiB); a member of 3 MiB cannot hold its half of layer 2's experts (4 MiB).
  PipelineExpertInputs tight = inputs(4, 2, 16u << 20);
  StatusOr<PipelineExpertPlan> fits = plan_pipeline_experts(tight);
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  tight.ranks[3].mem_cap_bytes = 3u << 20;
  refused(tight, "rank 3 (stage 1) needs");
  refused(tight, "streaming within a stage is not built");
  StatusOr<PipelineExpertPlan> tiny = plan_pipeline_experts(inputs(4, 2, 1u << 20));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("cannot be cut into 2 ranges"), std::string::npos) << tiny.status().message();
}

}  // namespace
}  // namespace sluice::plan
