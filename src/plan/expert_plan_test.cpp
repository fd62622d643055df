#include "plan/expert_plan.h"

#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

TEST(ExpertPlan, DistinctExpertsOfABatch) {
  EXPECT_DOUBLE_EQ(distinct_experts(160, 8, 1), 8.0);
  // Essay 002's premise for GLM-4.7: at a thousand tokens a step, every one of
  // the 160 experts moves.
  EXPECT_GT(distinct_experts(160, 8, 1024), 159.99);
  EXPECT_NEAR(distinct_experts(8, 2, 2), 8 * (1 - 0.75 * 0.75), 1e-12);
  EXPECT_DOUBLE_EQ(distinct_experts(0, 0, 5), 0.0);
}

TEST(ExpertPlan, HitRateLeavesRoomForTheReadAhead) {
  // The 4-layer Mixtral slice under a third of its size: 8 slots for 4 x 8
  // experts, top 2. Without prediction 8 / 32; the read-ahead of the next
  // layer's 2 takes 2 slots.
  EXPECT_DOUBLE_EQ(expected_hit_rate(8, 4, 8, 2.0), 6.0 / 30.0);
  EXPECT_DOUBLE_EQ(expected_hit_rate(32, 4, 8, 2.0), 1.0);   // every expert has a slot
  EXPECT_DOUBLE_EQ(expected_hit_rate(40, 4, 8, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(expected_hit_rate(2, 4, 8, 2.0), 0.0);    // the read-ahead takes them all
  // A batch whose step chooses all 8 experts of a layer reads all 8 ahead.
  EXPECT_DOUBLE_EQ(expected_hit_rate(8, 2, 8, 8.0), 0.0);
  EXPECT_DOUBLE_EQ(expected_hit_rate(12, 2, 8, 8.0), 0.5);
  // More slots never lower it.
  double last = 0;
  for (int64_t s = 8; s <= 32; ++s) {
    const double h = expected_hit_rate(s, 4, 8, 2.0);
    EXPECT_GE(h, last);
    last = h;
  }
}

ModelShape moe_shape() {
  return ModelShape{.name = "m", .n_vocab = 1000, .n_embd = 512, .n_layer = 4, .n_head = 8, .n_head_kv = 8,
                    .head_dim = 64, .n_ff = 0, .n_expert = 16, .n_expert_used = 2, .n_ff_expert = 256};
}

TEST(ExpertPlan, StepUnderABudgetFromTheHitRate) {
  const ModelShape s = moe_shape();
  const WeightBytes w = weight_bytes(s, uniform_mix(parse_weight_format("q8_0").value()));
  const Hardware hw{.name = "cpu", .mem_gbps = 50, .peak_tflops = 1};
  const double expert = static_cast<double>(w.of(TensorClass::kExperts)) / (4 * 16);
  const double resident = static_cast<double>(w.total() - w.of(TensorClass::kExperts));
  // Room for 4 experts per layer: 16 slots, 2 of them the next layer's
  // read-ahead, so 14 keep a share of the other 4 x 16 - 2 experts.
  auto p = plan_expert_stream({.shape = s, .weights = w, .hw = hw, .disk_gbps = 1,
                               .mem_budget_bytes = resident + 16 * expert + 1, .tokens_per_step = 1});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->fits);
  EXPECT_EQ(p->n_slots, 16);
  EXPECT_DOUBLE_EQ(p->hit_rate, 14.0 / 62.0);
  EXPECT_NEAR(p->read_bytes, (1 - 14.0 / 62.0) * 2 * expert * 4, 1e-6 * expert);
  EXPECT_DOUBLE_EQ(p->disk_s, p->read_bytes / 1e9);
  // At the step boundary the disk waits for one expert and the head, both
  // read at the memory rate here (one token).
  const double head = static_cast<double>(w.of(TensorClass::kOutput));
  EXPECT_NEAR(p->boundary_s, (expert + head) / 50e9, 1e-12);
  EXPECT_DOUBLE_EQ(p->step_s, std::max(p->compute_s, p->disk_s + p->boundary_s));
  EXPECT_GT(p->disk_s, p->compute_s);  // disk-bound: the boundary counts
  // The run's measured hit rate replaces the estimate.
  auto q = plan_expert_stream({.shape = s, .weights = w, .hw = hw, .disk_gbps = 1,
                               .mem_budget_bytes = resident + 16 * expert + 1, .tokens_per_step = 1, .hit_rate = 0.9});
  EXPECT_TRUE(q->hit_rate_measured);
  EXPECT_NEAR(q->read_bytes, 0.1 * 2 * expert * 4, 1e-6 * expert);
  EXPECT_LT(q->step_s, p->step_s);
  // A budget that cannot hold one layer's experts does not fit, and says so.
  auto r = plan_expert_stream({.shape = s, .weights = w, .hw = hw, .disk_gbps = 1, .mem_budget_bytes = resident + expert});
  EXPECT_FALSE(r->fits);
  EXPECT_NE(r->verdict.find("at least"), std::string::npos);
  // A dense model is refused.
  ModelShape dense = s;
  dense.n_expert = 0;
  dense.n_ff = 1024;
  EXPECT_FALSE(plan_expert_stream({.shape = dense, .weights = w, .hw = hw, .disk_gbps = 1}).ok());
}

}  // namespace
}  // namespace sluice::plan
