// The fluid split's contract (fluid_split.h): demote only when the planner's
// price is below the preemption or the wait it avoids, promote after a calm
// spell, never flap, never exceed the budget.
#include "plan/fluid_split.h"

#include <random>

#include <gtest/gtest.h>

#include "plan/tier_plan.h"

namespace sluice::plan {
namespace {

// 100 bytes: 20 that never move, 6 units of 10, blocks of 2. All resident:
// 10 blocks; each unit demoted gives 5 more.
FluidSplitConfig config() {
  return {.budget_bytes = 100, .floor_bytes = 20, .unit_bytes = 10, .n_units = 6, .kv_block_bytes = 2,
          .demote_cost_s = {0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06}, .promote_hold_steps = 3};
}

TEST(FluidSplit, DemotesWhenStreamingIsCheaperThanPreempting) {
  const FluidSplitConfig c = config();
  EXPECT_EQ(fluid_kv_blocks(c, 0), 10);
  // 10 blocks all held, the running sequences need 3 more: 1 unit covers it.
  // 0.01 s a step for 50 steps = 0.5 s, against 1 s of recomputation.
  const FluidLoad load{.n_blocks_used = 10, .n_blocks_running_need = 3, .preempt_cost_s = 1.0, .horizon_steps = 50};
  auto d = decide_fluid_split(c, {}, load);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->action, FluidAction::kDemote) << d->reason;
  EXPECT_EQ(d->next.n_demoted, 1);
  EXPECT_EQ(d->n_kv_blocks, 15);
  EXPECT_DOUBLE_EQ(d->weight_bytes, 70);
  // 8 short needs 2 units (10 blocks): 0.02 x 50 = 1 s is not below 1 s.
  d = decide_fluid_split(c, {}, {.n_blocks_used = 10, .n_blocks_running_need = 8, .preempt_cost_s = 1.0,
                                  .horizon_steps = 50});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action, FluidAction::kKeep) << d->reason;
  d = decide_fluid_split(c, {}, {.n_blocks_used = 10, .n_blocks_running_need = 8, .preempt_cost_s = 1.01,
                                  .horizon_steps = 50});
  EXPECT_EQ(d->action, FluidAction::kDemote) << d->reason;
  EXPECT_EQ(d->next.n_demoted, 2);
}

TEST(FluidSplit, KeepsWeightsWhenPreemptionIsCheaper) {
  const FluidSplitConfig c = config();
  auto d = decide_fluid_split(c, {}, {.n_blocks_used = 10, .n_blocks_running_need = 3, .preempt_cost_s = 0.4,
                                       .horizon_steps = 50});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action, FluidAction::kKeep);
  EXPECT_EQ(d->next.n_demoted, 0);
  EXPECT_EQ(d->n_kv_blocks, 10);
  EXPECT_NE(d->reason.find("preempting"), std::string::npos) << d->reason;
  // More than every unit could give (6 x 5 = 30 blocks): nothing moves.
  d = decide_fluid_split(c, {}, {.n_blocks_used = 10, .n_blocks_running_need = 31, .preempt_cost_s = 1e9});
  EXPECT_EQ(d->action, FluidAction::kKeep);
  // A price list shorter than the units (the planner's smallest budget): no demotion past it.
  FluidSplitConfig short_list = c;
  short_list.demote_cost_s = {0, 0.01};
  d = decide_fluid_split(short_list, {.n_demoted = 1}, {.n_blocks_used = 15, .n_blocks_running_need = 1,
                                                       .preempt_cost_s = 1e9});
  EXPECT_EQ(d->action, FluidAction::kKeep) << d->reason;
}

TEST(FluidSplit, AWaitingRequestIsPricedByItsWait) {
  const FluidSplitConfig c = config();
  // The running fit (4 held + 2 needed of 10); the waiting request needs 6: 2 short.
  const FluidLoad load{.n_blocks_used = 4, .n_blocks_running_need = 2, .n_blocks_waiting_need = 6,
                       .preempt_cost_s = 0, .wait_cost_s = 2.0, .horizon_steps = 100};
  auto d = decide_fluid_split(c, {}, load);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action, FluidAction::kDemote) << d->reason;  // 1 s < 2 s
  FluidLoad cheap_wait = load;
  cheap_wait.wait_cost_s = 0.5;
  d = decide_fluid_split(c, {}, cheap_wait);
  EXPECT_EQ(d->action, FluidAction::kKeep) << d->reason;
  EXPECT_NE(d->reason.find("waiting"), std::string::npos) << d->reason;
}

TEST(FluidSplit, PromotesBackAfterACalmSpell) {
  const FluidSplitConfig c = config();
  FluidSplitState s{.n_demoted = 2};
  const FluidLoad calm{.n_blocks_used = 5, .n_blocks_running_need = 1};
  for (int step = 1; step <= 2; ++step) {
    auto d = decide_fluid_split(c, s, calm);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->action, FluidAction::kKeep) << d->reason;
    s = d->next;
  }
  auto d = decide_fluid_split(c, s, calm);
  EXPECT_EQ(d->action, FluidAction::kPromote) << d->reason;
  EXPECT_EQ(d->next.n_demoted, 1);
  EXPECT_EQ(d->n_kv_blocks, 15);
  s = d->next;
  for (int step = 0; step < 3; ++step) s = decide_fluid_split(c, s, calm)->next;
  EXPECT_EQ(s.n_demoted, 0);  // three more calm steps: the last unit back
  // Blocks still held keep the unit out: 12 held cannot shrink to 10.
  d = decide_fluid_split(c, {.n_demoted = 1, .calm_steps = 10}, {.n_blocks_used = 12});
  EXPECT_EQ(d->action, FluidAction::kKeep) << d->reason;
  EXPECT_EQ(d->next.calm_steps, 0);
}

TEST(FluidSplit, DoesNotFlapOnAlternatingLoad) {
  const FluidSplitConfig c = config();
  const FluidLoad pressure{.n_blocks_used = 10, .n_blocks_running_need = 3, .preempt_cost_s = 1.0,
                           .horizon_steps = 50};
  const FluidLoad calm{.n_blocks_used = 2};
  FluidSplitState s;
  int demotes = 0, promotes = 0;
  for (int step = 0; step < 40; ++step) {
    auto d = decide_fluid_split(c, s, step % 2 == 0 ? pressure : calm);
    ASSERT_TRUE(d.ok());
    demotes += d->action == FluidAction::kDemote;
    promotes += d->action == FluidAction::kPromote;
    s = d->next;
  }
  EXPECT_EQ(demotes, 1);  // once, then the pressure fits the larger pool
  EXPECT_EQ(promotes, 0);
  EXPECT_EQ(s.n_demoted, 1);
}

TEST(FluidSplit, NeverExceedsTheBudgetNorTakesHeldBlocks) {
  const FluidSplitConfig c = config();
  std::mt19937 rng(43);
  FluidSplitState s;
  int last_change = -100, last_dir = 0, changes = 0;
  for (int step = 0; step < 5000; ++step) {
    const int64_t blocks = fluid_kv_blocks(c, s.n_demoted);
    std::uniform_int_distribution<int64_t> held(0, blocks), need(0, 8), wait(0, 6);
    const FluidLoad load{.n_blocks_used = held(rng), .n_blocks_running_need = need(rng),
                         .n_blocks_waiting_need = wait(rng),
                         .preempt_cost_s = std::uniform_real_distribution<double>(0, 2)(rng),
                         .wait_cost_s = std::uniform_real_distribution<double>(0, 2)(rng),
                         .horizon_steps = std::uniform_real_distribution<double>(1, 100)(rng)};
    auto d = decide_fluid_split(c, s, load);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_LE(d->weight_bytes + static_cast<double>(d->n_kv_blocks) * c.kv_block_bytes, c.budget_bytes);
    EXPECT_GE(d->next.n_demoted, 0);
    EXPECT_LE(d->next.n_demoted, c.n_units);
    if (d->action == FluidAction::kPromote) {
      EXPECT_GE(d->n_kv_blocks, load.n_blocks_used + load.n_blocks_running_need);
      // A promotion follows the last change by at least the hold.
      EXPECT_GE(step - last_change, c.promote_hold_steps);
    }
    if (d->action != FluidAction::kKeep) {
      const int dir = d->action == FluidAction::kDemote ? 1 : -1;
      if (dir != last_dir) ++changes;
      last_dir = dir;
      last_change = step;
    }
    s = d->next;
  }
  EXPECT_GT(changes, 2);  // the walk did move both ways
}

TEST(FluidSplit, RefusesBadConfigurations) {
  FluidSplitConfig c = config();
  c.budget_bytes = 10;  // below the floor
  EXPECT_EQ(decide_fluid_split(c, {}, {}).status().code(), StatusCode::kResourceExhausted);
  c = config();
  c.demote_cost_s = {0.5};
  EXPECT_FALSE(decide_fluid_split(c, {}, {}).ok());
  c = config();
  c.budget_bytes = 60;  // 20 + 6 x 10 = 80 resident does not fit; 2 demoted does
  EXPECT_FALSE(decide_fluid_split(c, {}, {}).ok());
  EXPECT_TRUE(decide_fluid_split(c, {.n_demoted = 2}, {}).ok());
}

// The price list from the planner: a dense 10-layer model (1 GB layers, a
// 2 GB head) all resident in HBM at 12 ms a step; one layer demoted brings
// the ring of 2, so 3 layers stream at 20 ms each: 60 ms, 48 ms more. Over 20
// steps 0.96 s: a preemption costing 1 s is worth avoiding, one of 0.9 s is not.
TEST(FluidSplit, PricedByTheTierPlanner) {
  TierInputs in;
  in.shape = ModelShape{.name = "d10", .n_vocab = 1000, .n_embd = 512, .n_layer = 10, .n_head = 8, .n_head_kv = 8,
                        .n_ff = 1024};
  in.weights.stored[static_cast<int>(TensorClass::kOutput)] = 2'000'000'000;
  in.weights.stored[static_cast<int>(TensorClass::kAttention)] = 10'000'000'000;
  in.weights.n_layer = 10;
  in.rates = {.hbm_gbps = 1000, .h2d_gbps = 50, .disk_gbps = 5, .gpu_tflops = 1e6};
  in.gpu_budget_bytes = 12e9;
  auto costs = demotion_costs(in, 10);
  ASSERT_TRUE(costs.ok()) << costs.status().to_string();
  FluidSplitConfig c{.budget_bytes = 14e9, .floor_bytes = 2e9, .unit_bytes = 1e9, .n_units = 10,
                     .kv_block_bytes = 0.1e9, .demote_cost_s = *costs};
  EXPECT_EQ(fluid_kv_blocks(c, 0), 20);
  const FluidLoad load{.n_blocks_used = 20, .n_blocks_running_need = 5, .preempt_cost_s = 1.0, .horizon_steps = 20};
  auto d = decide_fluid_split(c, {}, load);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->action, FluidAction::kDemote) << d->reason;
  FluidLoad dear = load;
  dear.preempt_cost_s = 0.9;
  EXPECT_EQ(decide_fluid_split(c, {}, dear)->action, FluidAction::kKeep);
}

// Streaming under the ring's cover is free until the reads outlast compute.
TEST(FluidSplit, RingDemotionsCostOnlyWhatTheReadsOutlast) {
  // compute 1.0 s a step, a layer read in 0.3 s, 2 layers streamed (0.6 s: hidden).
  auto c = ring_demotion_costs(1.0, 0.3, 2, 3);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), 4u);
  EXPECT_DOUBLE_EQ((*c)[0], 0.0);
  EXPECT_DOUBLE_EQ((*c)[1], 0.0);           // 0.9 s: still hidden
  EXPECT_NEAR((*c)[2], 0.2, 1e-12);          // 1.2 s
  EXPECT_NEAR((*c)[3], 0.5, 1e-12);          // 1.5 s
  EXPECT_FALSE(ring_demotion_costs(-1, 0.3, 2, 3).ok());
  EXPECT_FALSE(ring_demotion_costs(1, 0.3, -2, 3).ok());
}

}  // namespace
}  // namespace sluice::plan
