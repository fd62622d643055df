// The three-tier planner against numbers worked by hand from the formulas in
// tier_plan.h, on weights whose bytes are set directly (round figures).
#include "plan/tier_plan.h"

#include <gtest/gtest.h>

#include "plan/expert_plan.h"

namespace sluice::plan {
namespace {

void set(WeightBytes& w, TensorClass c, double bytes) { w.stored[static_cast<int>(c)] = static_cast<uint64_t>(bytes); }

// Ten layers of 1 GB (0.4 attention + 0.6 FFN), 1 GB embedding and 1 GB head:
// E = 2 GB, L = 1 GB. Embedding rows cost nothing, so a step of any size reads
// R = 11 GB: C = 11 ms at 1000 GB/s.
TierInputs dense_inputs() {
  TierInputs in;
  in.shape = ModelShape{.name = "d10", .n_vocab = 1000, .n_embd = 512, .n_layer = 10, .n_head = 8, .n_head_kv = 8,
                        .n_ff = 1024};
  set(in.weights, TensorClass::kEmbedding, 1e9);
  set(in.weights, TensorClass::kOutput, 1e9);
  set(in.weights, TensorClass::kAttention, 4e9);
  set(in.weights, TensorClass::kFfn, 6e9);
  in.weights.n_layer = 10;
  // FLOPs: a 512-token prefill takes 500 ms (2 A 512 / rate), a decode token 500/512 ms < 11.
  const double a = static_cast<double>(count_params(in.shape).active_matmul());
  in.rates = {.hbm_gbps = 1000, .h2d_gbps = 50, .disk_gbps = 5, .gpu_tflops = 2 * a * 512 / 0.5 / 1e12};
  return in;
}

TEST(TierPlan, EverythingFitsHbm) {
  for (double budget : {0.0, 12e9}) {  // unlimited, and exactly E + 10 L
    TierInputs in = dense_inputs();
    in.gpu_budget_bytes = budget;
    in.host_budget_bytes = 1;  // never consulted: nothing leaves the HBM
    auto p = plan_tiers(in);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->n_hbm_layers, 10);
    EXPECT_EQ(p->n_host_layers + p->n_disk_layers + p->n_ring_slots + p->n_staging_slots, 0);
    EXPECT_EQ(p->layer_map, "GGGGGGGGGG");
    EXPECT_DOUBLE_EQ(p->hbm_bytes, 12e9);
    EXPECT_NEAR(p->decode.step_s, 11e-3, 1e-12);
    EXPECT_EQ(p->decode.stall_s, 0);
    EXPECT_EQ(p->decode.bound, StreamBound::kCompute);
    EXPECT_NEAR(p->prefill.step_s, 0.5, 1e-9);
  }
}

TEST(TierPlan, ThreeTiersByHand) {
  TierInputs in = dense_inputs();
  in.gpu_budget_bytes = 8e9;   // E + 6 L: ring of 2, 4 layers resident
  in.host_budget_bytes = 3e9;  // 3 L: 2 staging slots, 1 layer resident
  auto p = plan_tiers(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->n_hbm_layers, 4);
  EXPECT_EQ(p->n_ring_slots, 2);
  EXPECT_EQ(p->n_host_layers, 1);
  EXPECT_EQ(p->n_staging_slots, 2);
  EXPECT_EQ(p->n_disk_layers, 5);
  // Streamed spread over 10 with 6 streamed: layers 1 3 4 6 8 9; of those the
  // disk ones spread over 6 with 5: all but the first.
  EXPECT_EQ(p->layer_map, "GHGDDGDGDD");
  EXPECT_DOUBLE_EQ(p->hbm_bytes, 8e9);
  EXPECT_DOUBLE_EQ(p->host_bytes, 3e9);
  EXPECT_DOUBLE_EQ(p->disk_only_bytes, 5e9);
  // Decode: C = 11 ms; 6 copies of 20 ms = 120 ms; 5 reads of 200 ms = 1 s.
  EXPECT_NEAR(p->decode.compute_s, 11e-3, 1e-12);
  EXPECT_NEAR(p->decode.h2d_s, 0.120, 1e-12);
  EXPECT_NEAR(p->decode.disk_s, 1.0, 1e-12);
  EXPECT_NEAR(p->decode.step_s, 1.0, 1e-12);
  EXPECT_NEAR(p->decode.stall_s, 0.989, 1e-12);
  EXPECT_EQ(p->decode.bound, StreamBound::kDisk);
  // K: a copy of 20 ms behind C / 6 = 1.833 ms of compute: ceil(10.9) + 1.
  EXPECT_EQ(p->n_ring_slots_planned, 12);
  EXPECT_FALSE(p->note.empty());  // why the ring stays at 2
  // Prefill of 512: C = 500 ms, so each copy hides behind 83 ms: K = 2; still disk-bound.
  EXPECT_NEAR(p->prefill.compute_s, 0.5, 1e-9);
  EXPECT_EQ(p->prefill.n_ring_slots_planned, 2);
  EXPECT_NEAR(p->prefill.step_s, 1.0, 1e-12);
  EXPECT_NEAR(p->prefill.stall_per_token_s, 0.5 / 512, 1e-12);
}

TEST(TierPlan, HostHoldsEveryStreamedLayer) {
  TierInputs in = dense_inputs();
  in.gpu_budget_bytes = 8e9;
  in.decode_tokens = 4;  // the same weights read for 4 sequences
  auto p = plan_tiers(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->n_host_layers, 6);
  EXPECT_EQ(p->n_disk_layers, 0);
  EXPECT_EQ(p->n_staging_slots, 0);
  EXPECT_EQ(p->layer_map, "GHGHHGHGHH");
  EXPECT_EQ(p->decode.disk_s, 0);
  EXPECT_NEAR(p->decode.step_s, 0.120, 1e-12);
  EXPECT_EQ(p->decode.bound, StreamBound::kLink);
  EXPECT_NEAR(p->decode.stall_per_token_s, (0.120 - 0.011) / 4, 1e-12);
  EXPECT_NEAR(p->decode.tokens_per_s, 4 / 0.120, 1e-9);
  // The prefill hides the link: 500 ms of compute against 120 ms of copies.
  EXPECT_EQ(p->prefill.bound, StreamBound::kCompute);
  EXPECT_EQ(p->prefill.stall_s, 0);
  // Seed 002's host buffer with every streamed layer from the disk, at the
  // prefill's 500 ms: each of the 6 streamed layers hides behind 83.3 ms, so
  // K = 2 and the disk delivers 6 x 83.3 / 200 = 2.5 layers during the pass;
  // 6 - 2 - 2.5 must be staged.
  EXPECT_NEAR(p->host_buffer_layers_planned, 6 - 2 - 2.5, 1e-9);
}

TEST(TierPlan, RefusesBudgetsThatCannotWorkWithTheMinimum) {
  TierInputs in = dense_inputs();
  in.gpu_budget_bytes = 4e9 - 1;  // below E + 2 L
  auto p = plan_tiers(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("4000000000 bytes"), std::string::npos) << p.status().to_string();
  in.gpu_budget_bytes = 4e9;  // exactly the minimum: every layer streams through 2 slots
  p = plan_tiers(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->n_hbm_layers, 0);
  EXPECT_EQ(p->layer_map, "HHHHHHHHHH");
  // Nothing fits the host: one layer's room is not a double buffer.
  in.host_budget_bytes = 1.5e9;
  p = plan_tiers(in);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("2000000000 bytes"), std::string::npos) << p.status().to_string();
  in.host_budget_bytes = 2e9;  // staging only: every layer read from the file every step
  p = plan_tiers(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->n_disk_layers, 10);
  EXPECT_NEAR(p->decode.step_s, 2.0, 1e-12);  // 10 x 200 ms
}

TEST(TierPlan, RejectsBadRates) {
  TierInputs in = dense_inputs();
  in.rates.h2d_gbps = 0;
  EXPECT_EQ(plan_tiers(in).status().code(), StatusCode::kInvalidArgument);
  in = dense_inputs();
  in.prefill_tokens = 0;
  EXPECT_EQ(plan_tiers(in).status().code(), StatusCode::kInvalidArgument);
}

// Four routed layers of 8 experts (top 2) of 0.1 GB, 0.2 GB of attention a
// layer, 0.5 GB embedding and head: resident E + dense = 1.8 GB; at one token
// R = 0.5 + 0.8 + 3.2 x 2/8 = 2.1 GB, C = 2.1 ms.
TierInputs routed_inputs() {
  TierInputs in;
  in.shape = ModelShape{.name = "m", .n_vocab = 1000, .n_embd = 512, .n_layer = 4, .n_head = 8, .n_head_kv = 8,
                        .head_dim = 64, .n_ff = 0, .n_expert = 8, .n_expert_used = 2, .n_ff_expert = 256};
  set(in.weights, TensorClass::kEmbedding, 0.5e9);
  set(in.weights, TensorClass::kOutput, 0.5e9);
  set(in.weights, TensorClass::kAttention, 0.8e9);
  set(in.weights, TensorClass::kExperts, 3.2e9);
  in.weights.n_layer = 4;
  in.weights.n_layer_moe = 4;
  in.weights.n_expert = 8;
  in.weights.n_expert_used = 2;
  in.rates = {.hbm_gbps = 1000, .h2d_gbps = 50, .disk_gbps = 5, .gpu_tflops = 1e6};  // FLOPs negligible
  return in;
}

TEST(TierPlan, ExpertsSplitAcrossTiers) {
  TierInputs in = routed_inputs();
  in.gpu_budget_bytes = 3.4e9;   // 1.8 + 16 slots x 0.1: 4 a layer
  in.host_budget_bytes = 1e9;    // 10 x 0.1: 2 staging, 8 experts
  auto p = plan_tiers(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->routed);
  EXPECT_EQ(p->n_experts, 32);
  EXPECT_EQ(p->n_hbm_experts, 16);
  EXPECT_EQ(p->n_host_experts, 8);
  EXPECT_EQ(p->n_disk_experts, 8);
  EXPECT_EQ(p->n_staging_slots, 2);
  EXPECT_NEAR(p->hbm_bytes, 3.4e9, 1);
  EXPECT_NEAR(p->host_bytes, 1e9, 1);
  // Decode: 2 chosen a layer; 14 of the 16 slots keep a share of the 30 others.
  const double h = 14.0 / 30.0;
  EXPECT_DOUBLE_EQ(p->decode.hbm_hit_rate, h);
  EXPECT_NEAR(p->decode.h2d_bytes, (1 - h) * 2 * 4 * 0.1e9, 1);
  EXPECT_NEAR(p->decode.h2d_s, (1 - h) * 0.8e9 / 50e9, 1e-12);
  EXPECT_DOUBLE_EQ(p->decode.host_hit_rate, 0.5);  // 8 of the 16 outside the HBM
  EXPECT_NEAR(p->decode.disk_s, (1 - h) * 0.8e9 * 0.5 / 5e9, 1e-12);
  // The boundary: one expert (0.1 GB) and the head (0.5 GB) at 1000 GB/s.
  EXPECT_NEAR(p->decode.boundary_s, 0.6e-3, 1e-9);
  EXPECT_NEAR(p->decode.compute_s, 2.1e-3, 1e-12);
  EXPECT_NEAR(p->decode.step_s, (1 - h) * 0.08 + 0.6e-3, 1e-9);  // 42.67 + 0.6 ms
  EXPECT_EQ(p->decode.bound, StreamBound::kDisk);
  // A 512-token prefill chooses every expert: the slots all hold read-ahead.
  EXPECT_NEAR(p->prefill.hbm_hit_rate, (16 - distinct_experts(8, 2, 512)) / (32 - distinct_experts(8, 2, 512)), 1e-12);
  // Unlimited host: every HBM miss is a host hit, the disk idles.
  in.host_budget_bytes = 0;
  p = plan_tiers(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_host_experts, 16);
  EXPECT_EQ(p->n_disk_experts, 0);
  EXPECT_EQ(p->decode.disk_s, 0);
  EXPECT_EQ(p->decode.bound, StreamBound::kLink);
  EXPECT_NEAR(p->decode.step_s, (1 - h) * 0.8e9 / 50e9 + 0.6e-3, 1e-12);
}

TEST(TierPlan, RoutedRefusalsAndAllResident) {
  TierInputs in = routed_inputs();
  in.gpu_budget_bytes = 2.6e9 - 1;  // 1.8 + one layer's 8 slots is the least
  auto p = plan_tiers(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("2600000000 bytes"), std::string::npos) << p.status().to_string();
  in.gpu_budget_bytes = 5e9;  // everything
  p = plan_tiers(in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_hbm_experts, 32);
  EXPECT_EQ(p->decode.h2d_s, 0);
  EXPECT_NEAR(p->decode.step_s, 2.1e-3, 1e-12);
  in.gpu_budget_bytes = 3.4e9;
  in.host_budget_bytes = 0.15e9;  // under 2 staging slots
  EXPECT_EQ(plan_tiers(in).status().code(), StatusCode::kResourceExhausted);
}

TEST(TierPlan, DemotionCostsFromThePlanner) {
  TierInputs in = dense_inputs();
  in.gpu_budget_bytes = 12e9;  // all resident: 11 ms
  auto c = demotion_costs(in, 20);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // One layer less costs the ring too: 10 - 3 = 7 resident, 3 copies of 20 ms
  // = 60 ms step; then each layer adds a copy. Stops below E + 2 L (8 layers down).
  ASSERT_EQ(c->size(), 9u);
  EXPECT_EQ((*c)[0], 0);
  EXPECT_NEAR((*c)[1], 0.060 - 0.011, 1e-12);
  EXPECT_NEAR((*c)[2], 0.080 - 0.011, 1e-12);
  EXPECT_NEAR((*c)[8], 0.200 - 0.011, 1e-12);
  for (size_t k = 1; k < c->size(); ++k) EXPECT_GE((*c)[k], (*c)[k - 1]);
}

}  // namespace
}  // namespace sluice::plan
