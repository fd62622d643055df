// plan_stream(): the ring sizing rule, budgets and refusals, the CPU-only case.
#include <gtest/gtest.h>

#include "plan/stream_plan.h"

namespace sluice::plan {
namespace {

StreamInputs base() {
  return {.n_layer = 10, .layer_bytes = 1e9, .layer_flops = 1e12, .compute_tflops = 10, .link_gbps = 10, .disk_gbps = 0};
}

TEST(StreamPlan, RingSlotsFollowTransferOverCompute) {
  // compute 0.1 s; transfer 1e9 / (g x 1e9): K = max(2, ceil(t/c) + 1)
  for (auto [gbps, k] : {std::pair<double, int64_t>{20, 2}, {10, 2}, {5, 3}, {2.5, 5}, {3, 5}}) {
    StreamInputs in = base();
    in.link_gbps = gbps;
    EXPECT_EQ(plan_stream(in)->n_ring_slots, k) << gbps;
  }
}

TEST(StreamPlan, RefusesOverBudgetWithAReason) {
  StreamInputs in = base();
  in.link_gbps = 2.5;  // K = 5: 5 GB of ring
  in.device_budget_bytes = 4e9;
  const StreamPlan p = plan_stream(in).value();
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.verdict.find("device budget"), std::string::npos) << p.verdict;
  in.device_budget_bytes = 5e9;
  EXPECT_TRUE(plan_stream(in)->fits);
}

TEST(StreamPlan, CpuOnlyFillsTheRingFromDisk) {
  StreamInputs in = base();
  in.link_gbps = 0;
  in.disk_gbps = 5;
  const StreamPlan p = plan_stream(in).value();
  EXPECT_DOUBLE_EQ(p.transfer_s, 0.2);
  EXPECT_DOUBLE_EQ(p.disk_s, 0.0);
  EXPECT_EQ(p.n_ring_slots, 3);
  EXPECT_EQ(p.bound, StreamBound::kDisk);
  EXPECT_DOUBLE_EQ(p.host_buffer_bytes, 0.0);
  EXPECT_DOUBLE_EQ(p.step_s, 2.0);
  EXPECT_DOUBLE_EQ(p.overhead, 1.0);
}

TEST(StreamPlan, ResidentInHostHoldsEverythingOutsideTheRing) {
  const StreamPlan p = plan_stream(base()).value();
  EXPECT_DOUBLE_EQ(p.host_buffer_layers, 8.0);
  EXPECT_EQ(p.bound, StreamBound::kCompute);
  EXPECT_NE(p.verdict.find("compute-bound"), std::string::npos);
}

TEST(StreamPlan, BadInputsAreErrors) {
  StreamInputs in = base();
  in.n_layer = 0;
  EXPECT_EQ(plan_stream(in).status().code(), StatusCode::kInvalidArgument);
  in = base();
  in.link_gbps = 0;
  EXPECT_FALSE(plan_stream(in).ok());
  in = base();
  in.compute_tflops = 0;
  EXPECT_FALSE(plan_stream(in).ok());
}

TEST(StreamPlan, GridMarksDisksFasterThanTheLinkNotApplicable) {
  const auto grid = plan_stream_grid({.n_layer = 4, .layer_bytes = 1e9, .layer_active_params = 1e9,
                                      .compute_tflops = 100, .disks = {Disk{"fast", 30}},
                                      .links = {Link{"slow", 10}}});
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->size(), 1u);
  EXPECT_FALSE((*grid)[0].applicable);
  EXPECT_FALSE((*grid)[0].min_tokens.has_value());
}

}  // namespace
}  // namespace sluice::plan
