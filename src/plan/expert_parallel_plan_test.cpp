#include "plan/expert_parallel_plan.h"

#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

ExpertParallelInputs inputs(int n_ranks) {
  ExpertParallelInputs in{.n_expert = 8, .n_expert_used = 2, .n_embd = 64, .n_routed_layers = 4,
                          .expert_bytes = 1 << 20, .expert_flops = 2e6, .dense_bytes = 8 << 20,
                          .dense_read_bytes = 6 << 20, .dense_flops_per_token = 1.2e7};
  for (int r = 0; r < n_ranks; ++r) {
    in.ranks.push_back({.host = "h", .mem_cap_bytes = 1ull << 30, .read_gbps = 10, .tflops = 0.1, .n_threads = 1});
    in.links.push_back({.latency_s = 50e-6, .gbps = 1});
  }
  return in;
}

TEST(ExpertParallelPlan, SharesAreContiguousAndCoverEveryExpert) {
  for (int S : {1, 2, 3, 8}) {
    StatusOr<ExpertParallelPlan> p = plan_expert_parallel(inputs(S));
    ASSERT_TRUE(p.ok()) << p.status().message();
    ASSERT_EQ(p->n_ranks(), S);
    int64_t next = 0;
    for (int r = 0; r < S; ++r) {
      EXPECT_EQ(p->shares[static_cast<size_t>(r)].begin, next);
      EXPECT_GT(p->shares[static_cast<size_t>(r)].end, next);
      next = p->shares[static_cast<size_t>(r)].end;
    }
    EXPECT_EQ(next, 8);
    // Rank 0 holds the rest of the model beside its experts.
    const auto e0 = static_cast<uint64_t>(p->shares[0].end - p->shares[0].begin);
    EXPECT_EQ(p->rank_bytes[0], (8u << 20) + e0 * 4 * (1u << 20));
  }
}

TEST(ExpertParallelPlan, StepCountsTheLinks) {
  StatusOr<ExpertParallelPlan> one = plan_expert_parallel(inputs(1));
  ExpertParallelInputs slow_in = inputs(2);
  StatusOr<ExpertParallelPlan> two = plan_expert_parallel(slow_in);
  slow_in.links[1].latency_s = 5e-3;
  StatusOr<ExpertParallelPlan> slow = plan_expert_parallel(slow_in);
  ASSERT_TRUE(one.ok() && two.ok() && slow.ok());
  EXPECT_EQ(one->network_s(1), 0.0);
  EXPECT_GT(two->network_s(1), 0.0);
  // Each routed layer waits for the slow link's round trip at least.
  EXPECT_GE(slow->step_s(1), 4 * 2 * 5e-3);
  EXPECT_GT(slow->step_s(1), two->step_s(1));
  EXPECT_GT(slow->network_s(1), two->network_s(1));
  // Half the rows go to rank 1: n x k / 2 rows of n_embd floats each way.
  EXPECT_DOUBLE_EQ(two->bytes_back(1, 10), 10.0 * 2 / 2 * 64 * 4);
  EXPECT_DOUBLE_EQ(two->bytes_out(1, 10), 16 + 10.0 * 2 / 2 * (64 * 4 + 4));
}

TEST(ExpertParallelPlan, Refusals) {
  ExpertParallelInputs dense = inputs(2);
  dense.n_expert = 0;
  StatusOr<ExpertParallelPlan> p = plan_expert_parallel(dense);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("mixture-of-experts"), std::string::npos) << p.status().message();
  p = plan_expert_parallel(inputs(9));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("at least one expert per rank"), std::string::npos) << p.status().message();
  ExpertParallelInputs small = inputs(2);
  small.ranks[1].mem_cap_bytes = 1 << 20;
  small.ranks[1].budget_given = true;
  p = plan_expert_parallel(small);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("rank 1 needs"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("--mem-budget"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace sluice::plan
