#include "plan/pipeline_plan.h"

#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

PipelineInputs inputs(int n_layer, int n_ranks, uint64_t cap) {
  PipelineInputs in;
  in.layer_bytes.assign(static_cast<size_t>(n_layer), 100);
  in.layer_flops_per_token.assign(static_cast<size_t>(n_layer), 200);
  in.head_bytes = 50;
  in.head_read_bytes = 50;
  in.n_embd = 64;
  for (int r = 0; r < n_ranks; ++r) {
    in.ranks.push_back({.mem_cap_bytes = cap, .read_gbps = 1, .tflops = 1});
    in.links.push_back({.latency_s = 1e-5, .gbps = 1});
  }
  return in;
}

TEST(PipelinePlan, EqualRanksGetBalancedContiguousRanges) {
  auto p = plan_pipeline(inputs(8, 2, 10000));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // Rank 0 holds the head (50 bytes): the even cut 4 + 4 is as good as any.
  EXPECT_EQ(p->ranges[0].begin, 0);
  EXPECT_EQ(p->ranges[0].end, p->ranges[1].begin);
  EXPECT_EQ(p->ranges[1].end, 8);
  EXPECT_EQ(p->ranges[0].end, 4);
  EXPECT_EQ(p->stage_bytes[0], 450u);
  EXPECT_EQ(p->stage_bytes[1], 400u);
}

TEST(PipelinePlan, AFasterRankTakesMoreLayers) {
  PipelineInputs in = inputs(9, 2, 10000);
  in.ranks[1].read_gbps = 2;
  auto p = plan_pipeline(in);
  ASSERT_TRUE(p.ok());
  EXPECT_LT(p->ranges[0].end - p->ranges[0].begin, p->ranges[1].end - p->ranges[1].begin);
}

TEST(PipelinePlan, MemoryCapsBindTheCut) {
  PipelineInputs in = inputs(8, 2, 10000);
  in.ranks[0].mem_cap_bytes = 260;  // head + 2 layers
  auto p = plan_pipeline(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ranges[0].end, 2);
  EXPECT_LE(p->stage_bytes[0], 260u);
}

TEST(PipelinePlan, RefusesWhatFitsNowhereAndTooManyRanks) {
  auto p = plan_pipeline(inputs(8, 2, 300));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("cannot be cut into 2 ranges that fit"), std::string::npos);
  EXPECT_FALSE(plan_pipeline(inputs(2, 3, 10000)).ok());
}

TEST(PipelinePlan, StepTimeAddsLinksAndMicroBatchesHelpOnlyWhenComputeBound) {
  PipelineInputs in = inputs(8, 2, 10000);
  auto p = plan_pipeline(in);
  ASSERT_TRUE(p.ok());
  // Decode (memory-bound): stages + a hop each way.
  const double hop = 1e-5 + 64 * 4 / 1e9;
  EXPECT_NEAR(p->step_s(1, 1, 1), 450e-9 + 400e-9 + 2 * hop, 1e-12);
  EXPECT_EQ(p->best_micro_batches(1, 1, 8), 1);
  // A long prefill is compute-bound: micro-batches overlap the stages.
  EXPECT_GT(p->best_micro_batches(100000, 1, 8), 1);
  EXPECT_LT(p->step_s(100000, 1, 4), p->step_s(100000, 1, 1));
  EXPECT_EQ(p->hop_bytes(1, 10, 2), 10u * 64 * 4);
  EXPECT_EQ(p->hop_bytes(0, 10, 2), 2u * 64 * 4);
}

}  // namespace
}  // namespace sluice::plan
