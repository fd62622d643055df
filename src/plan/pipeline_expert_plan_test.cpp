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
  refused(tight, "may hold 3.00 MiB (memory available)");
  StatusOr<PipelineExpertPlan> tiny = plan_pipeline_experts(inputs(4, 2, 1u << 20));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("cannot be cut into 2 ranges"), std::string::npos) << tiny.status().message();
}

// The same model with experts that stream (slots of 1.25 MiB, each layer's
// dense part 1 MiB resident) and every rank under a budget, disks at 1 GB/s.
PipelineExpertInputs streaming_expert_inputs(uint64_t budget) {
  PipelineExpertInputs in = inputs(4, 2, budget);
  in.layers.n_expert = 8;
  in.layers.expert_pick = 2.0 / 8;
  in.layers.expert_slot_bytes = in.experts.expert_slot_bytes = 5u << 18;
  in.layers.expert_bytes = 1 << 20;
  in.layers.layer_dense_bytes = {1u << 20, 1u << 20, 1u << 20, 3u << 20};
  in.layers.layer_routed = {1, 1, 1, 0};
  for (RankResources& k : in.ranks) {
    k.budget_given = true;
    k.disk_gbps = 1;
  }
  return in;
}

TEST(PipelineExpertPlan, PartsBeyondTheirBudgetsStreamTheirShares) {
  // 9 MiB a rank (rank 1: 6 MiB): no cut holds both leads' parts in memory
  // (the head and layers 0-1 with half their experts take 12 MiB, layers 1-3
  // 13), so lead 0 keeps its layers' dense parts and pools 4 slots for its
  // share (the cut 0-1 | 2-3); rank 1's share of layers 0-1 (8 MiB) does not
  // fit its budget, and it pools its own.
  PipelineExpertInputs in = streaming_expert_inputs(9u << 20);
  in.ranks[1].mem_cap_bytes = 6u << 20;
  StatusOr<PipelineExpertPlan> p = plan_pipeline_experts(in);
  ASSERT_TRUE(p.ok()) << p.status().message();
  bool any_lead = false, any_member = false;
  for (int64_t g = 0; g < p->n_stages(); ++g) {
    const ExpertParallelPlan& e = p->stages[static_cast<size_t>(g)];
    any_lead = any_lead || p->pipeline.streams_experts(g);
    EXPECT_EQ(p->pipeline.streams_experts(g), e.streams(0)) << g;  // both steps agree on the lead
    for (int64_t m = 0; m < 2; ++m) {
      EXPECT_LE(e.rank_bytes[static_cast<size_t>(m)], 9u << 20) << g << " " << m;
      if (m > 0) any_member = any_member || e.streams(m);
    }
    if (e.streams(0)) {
      // The lead streams only its share (4 experts a routed layer), found in a
      // slot at the hit rate of its pool, and the disk is in the stage's step.
      EXPECT_EQ(p->pipeline.n_expert, 4);
      EXPECT_GT(e.disk_s(0, 1), 0.0);
      EXPECT_LT(e.hit_rate(0, 1), 1.0);
    }
  }
  EXPECT_TRUE(any_lead);
  EXPECT_TRUE(any_member);
  // Each stage's disk time is in the job's step.
  PipelineExpertInputs roomy = streaming_expert_inputs(1ull << 30);
  StatusOr<PipelineExpertPlan> held = plan_pipeline_experts(roomy);
  ASSERT_TRUE(held.ok());
  EXPECT_GT(p->step_s(1), held->step_s(1));
  // Below a routed layer's share of slots even streaming: refused with the least.
  StatusOr<PipelineExpertPlan> tiny = plan_pipeline_experts(streaming_expert_inputs(4u << 20));
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("the least a rank streaming its experts from its disk needs"),
            std::string::npos)
      << tiny.status().message();
  // A member below its share's slots: named, with what streaming needs.
  PipelineExpertInputs member = streaming_expert_inputs(9u << 20);
  member.ranks[3].mem_cap_bytes = 3u << 20;  // its share: 4 MiB; 4 slots of 1.25 MiB
  StatusOr<PipelineExpertPlan> short_member = plan_pipeline_experts(member);
  ASSERT_FALSE(short_member.ok());
  EXPECT_NE(short_member.status().message().find("rank 3 (stage 1)"), std::string::npos)
      << short_member.status().message();
  EXPECT_NE(short_member.status().message().find("streaming the share from its disk needs at least 5.00 MiB"),
            std::string::npos)
      << short_member.status().message();
}

}  // namespace
}  // namespace sluice::plan
