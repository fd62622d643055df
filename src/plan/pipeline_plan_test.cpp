#include "plan/pipeline_plan.h"

#include <gtest/gtest.h>

#include <cmath>

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

// A rank slower at fewer rows (its forward timed by rows) makes each
// micro-batch dearer: the plan's step at m micro-batches reads the rate at
// n/m rows, and the shared curve (every rank at once) when m > 1.
TEST(PipelinePlan, MicroBatchesAreTimedAtTheirRowsAndWithTheOtherStagesRunning) {
  PipelineInputs in = inputs(8, 2, 10000);
  const double n = 1e5;  // compute-bound
  auto flat = plan_pipeline(in);
  ASSERT_TRUE(flat.ok());
  for (RankResources& k : in.ranks) k.forward_curve = RateCurve({{1000, 0.25}, {100000, 1.0}});
  auto curved = plan_pipeline(in);
  ASSERT_TRUE(curved.ok());
  // One micro-batch of 1e5 rows: the curve's top, the flat rate.
  EXPECT_NEAR(curved->step_s(100000, 1, 1), flat->step_s(100000, 1, 1), 1e-12);
  // Four of 25000 rows: log2(25) / log2(100) of the way from 0.25 to 1.
  const double rate = 0.25 + 0.75 * std::log2(25.0) / std::log2(100.0);
  EXPECT_NEAR(curved->stage_s(1, n / 4, false), 4 * 200 * (n / 4) / (rate * 1e12), 1e-12);
  EXPECT_GT(curved->step_s(100000, 1, 4), flat->step_s(100000, 1, 4));
  EXPECT_LE(curved->best_micro_batches(100000, 1, 8), flat->best_micro_batches(100000, 1, 8));
  // Decode stays memory-bound: the curve is flat below its first point.
  EXPECT_NEAR(curved->step_s(1, 1, 1), flat->step_s(1, 1, 1), 1e-12);
  // Every rank at once at half the rate: a step in micro-batches takes it,
  // one micro-batch (the stages in turn) does not.
  for (RankResources& k : in.ranks) k.forward_curve_shared = RateCurve({{1000, 0.125}, {100000, 0.5}});
  auto shared = plan_pipeline(in);
  ASSERT_TRUE(shared.ok());
  EXPECT_NEAR(shared->stage_s(1, n / 4, true), 2 * curved->stage_s(1, n / 4, false), 1e-12);
  EXPECT_NEAR(shared->step_s(100000, 1, 1), curved->step_s(100000, 1, 1), 1e-12);
  EXPECT_GT(shared->step_s(100000, 1, 4), curved->step_s(100000, 1, 4));
}

// One prompt's later micro-batches attend over the earlier ones' keys: with
// an attention cost per query and key, micro-batch i of n rows adds
// layers x cost x n x i n to each stage; a batch of sequences adds nothing.
TEST(PipelinePlan, APromptsLaterMicroBatchesPayForTheKeysBeforeThem) {
  PipelineInputs in = inputs(8, 2, 10000);
  for (LinkFigures& l : in.links) l = {.latency_s = 0, .gbps = 1e9};  // the stages, not the hops, set the step
  auto plain = plan_pipeline(in);
  ASSERT_TRUE(plain.ok());
  for (RankResources& k : in.ranks) k.attention_pair_s = 1e-9;
  auto p = plan_pipeline(in);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ranges[1].end - p->ranges[1].begin, 4);
  const double n = 25000;  // 4 micro-batches of 1e5 tokens
  EXPECT_NEAR(p->stage_s(1, n, false, -1, 2 * n) - plain->stage_s(1, n, false, -1, 2 * n), 4 * 1e-9 * n * 2 * n, 1e-9);
  EXPECT_NEAR(p->step_s(100000, 1, 1, true), plain->step_s(100000, 1, 1, true), 1e-12);
  EXPECT_NEAR(p->step_s(100000, 1, 4, false), plain->step_s(100000, 1, 4, false), 1e-12);
  // Both stages hold 4 layers: the slower of them in micro-batches 1..3 pays
  // 4 x 1e-9 x n x (i n) more.
  const double extra = 4 * 1e-9 * n * n * (1 + 2 + 3);
  EXPECT_NEAR(p->step_s(100000, 1, 4, true) - plain->step_s(100000, 1, 4, true), extra, extra * 1e-9);
}

// 16 layers of 100 bytes (a slot each, nothing pinned); rank 0 under its own
// budget of 450 bytes: the head (50), a ring of 2 slots and 2 resident layers,
// or 4 layers in memory; its disk at `disk_gbps` (the memory reads at 1).
PipelineInputs streaming_inputs(double disk_gbps) {
  PipelineInputs in = inputs(16, 2, 100000);
  in.layer_slot_bytes.assign(16, 100);
  in.layer_pinned_bytes.assign(16, 0);
  in.ranks[0].mem_cap_bytes = 450;
  in.ranks[0].budget_given = true;
  in.ranks[0].disk_gbps = disk_gbps;
  return in;
}

TEST(PipelinePlan, ARankBeyondItsBudgetStreamsTheRestOfItsRange) {
  // A disk as fast as memory hides behind the reads: rank 0 keeps its even
  // share (8 layers, 4 more than its memory holds), streaming 6 of them.
  auto fast = plan_pipeline(streaming_inputs(2));
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  EXPECT_EQ(fast->ranges[0].end, 8);
  EXPECT_EQ(fast->stage_streamed[0], 6);
  EXPECT_EQ(fast->stage_ring_slots[0], 2);
  EXPECT_EQ(fast->stage_bytes[0], 450u);  // head + 2 resident layers + 2 slots
  EXPECT_EQ(fast->range_bytes[0], 850u);
  EXPECT_NEAR(fast->stage_disk_s[0], 6 * 100 / 2e9, 1e-15);
  EXPECT_FALSE(fast->streams(1));
  // The placement's spread: resident layers between streamed runs.
  int resident = 0;
  for (int64_t l = 0; l < 8; ++l) resident += fast->layer_streamed(0, l) ? 0 : 1;
  EXPECT_EQ(resident, 2);
  EXPECT_FALSE(fast->layer_streamed(0, 8));
}

// Two streaming ranks on one host read one disk: while both stages run (a
// step in micro-batches) each reads at half its rate; on two hosts, each at
// its own.
TEST(PipelinePlan, StreamingRanksOfOneHostShareItsDisk) {
  PipelineInputs in = streaming_inputs(0.5);
  in.ranks[1].mem_cap_bytes = 450;
  in.ranks[1].budget_given = true;
  in.ranks[1].disk_gbps = 0.5;
  auto one_host = plan_pipeline(in);
  ASSERT_TRUE(one_host.ok()) << one_host.status().to_string();
  ASSERT_TRUE(one_host->streams(0) && one_host->streams(1));
  EXPECT_EQ(one_host->stage_disk_sharers[0], 2);
  EXPECT_NEAR(one_host->stage_s(1, 1, true), 2 * one_host->stage_disk_s[1], 1e-15);
  EXPECT_NEAR(one_host->stage_s(1, 1, false), one_host->stage_disk_s[1], 1e-15);
  in.ranks[1].host = "other";
  auto two_hosts = plan_pipeline(in);
  ASSERT_TRUE(two_hosts.ok());
  EXPECT_EQ(two_hosts->stage_disk_sharers[1], 1);
  EXPECT_NEAR(two_hosts->stage_s(1, 1, true), two_hosts->stage_disk_s[1], 1e-15);
}

TEST(PipelinePlan, ASlowerDiskShiftsLayersOffTheStreamingRank) {
  // At 0.5 GB/s a streamed layer costs 200 ns against 100 ns from memory:
  // plan_stream sizes a ring of 3, one layer stays resident, and the cut
  // gives rank 0 six layers (max(650, 5 x 200) = 1000 ns = rank 1's ten).
  auto medium = plan_pipeline(streaming_inputs(0.5));
  ASSERT_TRUE(medium.ok()) << medium.status().to_string();
  EXPECT_EQ(medium->ranges[0].end, 6);
  EXPECT_EQ(medium->stage_ring_slots[0], 3);
  EXPECT_EQ(medium->stage_streamed[0], 5);
  EXPECT_NEAR(medium->stage_disk_s[0], 5 * 200e-9, 1e-15);
  EXPECT_NEAR(medium->stage_s(0, 1), 1000e-9, 1e-15);  // the disk leg is the stage
  EXPECT_NEAR(medium->step_s(1, 1, 1), 1000e-9 + 1000e-9 + 2 * (1e-5 + 64 * 4 / 1e9), 1e-12);
  // At 0.125 GB/s (800 ns a layer) streaming loses to memory: rank 0 keeps
  // the 4 layers its budget holds, rank 1 the other 12.
  auto slow = plan_pipeline(streaming_inputs(0.125));
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  EXPECT_EQ(slow->ranges[0].end, 4);
  EXPECT_FALSE(slow->streams(0));
  EXPECT_EQ(slow->stage_bytes[0], 450u);
  // Without a budget of its own a rank does not stream, whatever its disk.
  PipelineInputs no_budget = streaming_inputs(2);
  no_budget.ranks[0].budget_given = false;
  auto held = plan_pipeline(no_budget);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->ranges[0].end, 4);
  EXPECT_FALSE(held->streams(0));
}

TEST(PipelinePlan, RefusesABudgetBelowTheStreamingMinimumWithItsNumbers) {
  PipelineInputs in = streaming_inputs(2);
  in.ranks[0].mem_cap_bytes = 120;  // the head (50) + a layer need 150; + 2 slots of 100, 250
  in.ranks[0].host = "node-a";
  auto p = plan_pipeline(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("rank 0 (node-a): --mem-budget 0.00 MiB < 0.00 MiB to hold its smallest range (layers 0-0 +head)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("the least a rank streaming from its disk needs"), std::string::npos) << m;
  EXPECT_NE(m.find("a ring of 2 slots"), std::string::npos) << m;
}

// 8 routed layers of 1000 bytes: 200 dense, 16 experts of 50 (slots of 60),
// 2 chosen a token; two ranks under budgets of 2000 bytes each, disks at 1 GB/s.
PipelineInputs routed_pipeline_inputs(uint64_t cap) {
  PipelineInputs in = inputs(8, 2, cap);
  in.layer_bytes.assign(8, 1000);
  in.layer_read_bytes.assign(8, 300);  // dense + 2 experts
  in.n_expert = 16;
  in.expert_pick = 2.0 / 16;
  in.expert_slot_bytes = 60;
  in.expert_bytes = 50;
  in.layer_dense_bytes.assign(8, 200);
  in.layer_routed.assign(8, 1);
  for (RankResources& k : in.ranks) {
    k.budget_given = true;
    k.disk_gbps = 1;
  }
  return in;
}

TEST(PipelinePlan, RoutedRangesBeyondTheirBudgetsStreamTheirExperts) {
  // 8050 bytes over two ranks of 2000: each keeps its layers' dense parts
  // (and rank 0 the head) and pools expert slots in the rest.
  auto p = plan_pipeline(routed_pipeline_inputs(2000));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  for (int64_t r = 0; r < 2; ++r) {
    const auto i = static_cast<size_t>(r);
    const LayerRange g = p->ranges[i];
    const int64_t n = g.end - g.begin;
    EXPECT_TRUE(p->streams(r));
    EXPECT_TRUE(p->streams_experts(r));
    EXPECT_EQ(p->stage_streamed[i], 0);  // layers stay; experts stream
    EXPECT_FALSE(p->layer_streamed(r, g.begin));
    EXPECT_EQ(p->stage_routed_layers[i], n);
    const uint64_t resident = (r == 0 ? 50u : 0u) + 200u * static_cast<uint64_t>(n);
    EXPECT_EQ(p->stage_expert_slots[i], static_cast<int64_t>((2000 - resident) / 60));
    EXPECT_EQ(p->stage_bytes[i], resident + 60u * static_cast<uint64_t>(p->stage_expert_slots[i]));
    EXPECT_LE(p->stage_bytes[i], 2000u);
    // A decode token chooses 2 experts a routed layer and finds (Z - 2) / (16 n - 2) of them in a slot.
    const double h = (static_cast<double>(p->stage_expert_slots[i]) - 2) / (16.0 * static_cast<double>(n) - 2);
    EXPECT_NEAR(p->expert_hit_rate(r, 1), h, 1e-12);
    EXPECT_NEAR(p->disk_s(r, 1), static_cast<double>(n) * (1 - h) * 2 * 50 / 1e9, 1e-15);
    // A long prefill chooses every expert: more of them miss.
    EXPECT_GT(p->disk_s(r, 1000), p->disk_s(r, 1));
    // The stage reads a token's chosen experts from memory, not all of them.
    EXPECT_NEAR(p->stage_read_s[i], (300.0 * static_cast<double>(n) + (r == 0 ? 50 : 0)) / 1e9, 1e-15);
    // The misses are read once a layer routes: on top of the stage's compute.
    EXPECT_NEAR(p->stage_s(r, 1), p->stage_read_s[i] + p->disk_s(r, 1), 1e-15);
  }
  // Budgets that hold the model: nothing streams.
  auto held = plan_pipeline(routed_pipeline_inputs(10000));
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(held->streams(0));
  EXPECT_FALSE(held->streams(1));
  EXPECT_EQ(held->disk_s(0, 1), 0.0);
}

TEST(PipelinePlan, RefusesARoutedRangeBelowOneLayersExperts) {
  // Rank 0's smallest range holds in 1050 bytes; streaming its experts, its
  // resident part (the head and layer 0's dense: 250 bytes) and a routed
  // layer's 16 experts in slots need 1210. Neither fits 900.
  PipelineInputs in = routed_pipeline_inputs(900);
  in.ranks[0].host = "node-a";
  auto p = plan_pipeline(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("the least a rank streaming its experts from its disk needs"), std::string::npos) << m;
  EXPECT_NE(m.find("a routed layer's 16 experts in slots"), std::string::npos) << m;
}

}  // namespace
}  // namespace sluice::plan
