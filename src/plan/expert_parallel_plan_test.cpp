#include "plan/expert_parallel_plan.h"

#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sluice::plan {
namespace {

ExpertParallelInputs inputs(int n_ranks) {
  ExpertParallelInputs in{.n_expert = 8, .n_expert_used = 2, .n_embd = 64, .n_routed_layers = 4,
                          .expert_bytes = 1 << 20, .expert_flops = 2e6, .dense_bytes = 8 << 20,
                          .dense_read_bytes = 6 << 20, .dense_flops_per_token = 1.2e7,
                          .expert_slot_bytes = (1 << 20) + (12 << 10), .dense_resident_bytes = (8 << 20) + (64 << 10)};
  for (int r = 0; r < n_ranks; ++r) {
    in.ranks.push_back({.host = "h", .mem_cap_bytes = 1ull << 30, .read_gbps = 10, .tflops = 0.1, .n_threads = 1,
                        .disk_gbps = 1});
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

// Rank 1's share (4 experts x 4 layers of 1 MiB) beyond its 10 MiB budget:
// it streams through a pool of 9 slots, and each routed layer waits for the
// experts it misses, read at its disk rate.
TEST(ExpertParallelPlan, AShareBeyondItsBudgetStreamsAndTheStepCountsItsDisk) {
  const ExpertParallelInputs in = inputs(2);
  ExpertParallelInputs small = in;
  small.ranks[1].mem_cap_bytes = 10 << 20;
  small.ranks[1].budget_given = true;
  StatusOr<ExpertParallelPlan> all = plan_expert_parallel(in);
  StatusOr<ExpertParallelPlan> p = plan_expert_parallel(small);
  ASSERT_TRUE(all.ok() && p.ok()) << p.status().message();
  EXPECT_FALSE(p->streams(0));
  ASSERT_TRUE(p->streams(1));
  const uint64_t slot = in.expert_slot_bytes;
  EXPECT_EQ(p->slots[1], static_cast<int64_t>((10u << 20) / slot));
  EXPECT_EQ(p->rank_bytes[1], static_cast<uint64_t>(p->slots[1]) * slot);
  EXPECT_EQ(p->share_bytes[1], 16u << 20);
  EXPECT_LE(p->rank_bytes[1], 10u << 20);
  // A rank that does not route reads what it is sent: hit rate = slots / (layers x share).
  EXPECT_DOUBLE_EQ(p->hit_rate(1, 1), static_cast<double>(p->slots[1]) / 16.0);
  EXPECT_DOUBLE_EQ(p->hit_rate(0, 1), 1.0);
  EXPECT_EQ(p->disk_s(0, 1), 0.0);
  // disk_1 = (1 - h) x u_1 x expert_bytes / disk rate, u_1 = 4 x (1 - (1 - 2/8)^n).
  for (double n : {1.0, 16.0}) {
    const double u = 4 * (1 - std::pow(0.75, n));
    EXPECT_DOUBLE_EQ(p->used_experts(1, n), u);
    const double disk = (1 - p->hit_rate(1, n)) * u * (1 << 20) / 1e9;
    EXPECT_DOUBLE_EQ(p->disk_s(1, n), disk);
    EXPECT_DOUBLE_EQ(p->experts_s(1, n), all->experts_s(1, n) + disk);
  }
  // The step: rank 1's routed layers take its reads longer (4 routed layers).
  EXPECT_NEAR(p->step_s(1) - all->step_s(1), 4 * p->disk_s(1, 1), 1e-12);
  EXPECT_NEAR(p->disk_wait_s(1), 4 * p->disk_s(1, 1), 1e-12);
  EXPECT_EQ(all->disk_wait_s(1), 0.0);
  // At a tenth of the disk rate the reads take ten times as long.
  ExpertParallelInputs slow = small;
  slow.ranks[1].disk_gbps = 0.1;
  StatusOr<ExpertParallelPlan> s = plan_expert_parallel(slow);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->disk_s(1, 1), 10 * p->disk_s(1, 1), 1e-15);
  EXPECT_GT(s->step_s(1), p->step_s(1));
}

// Rank 0 streams too: its dense part resident, a pool beside it; it routes
// and predicts, so its hit rate is expert_plan's with read-ahead; a larger
// pool reads less.
TEST(ExpertParallelPlan, RankZeroStreamsBesideItsDensePart) {
  ExpertParallelInputs in = inputs(2);
  in.ranks[0].mem_cap_bytes = in.dense_resident_bytes + 6 * in.expert_slot_bytes + 100;
  in.ranks[0].budget_given = true;
  StatusOr<ExpertParallelPlan> p = plan_expert_parallel(in);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->streams(0));
  EXPECT_EQ(p->slots[0], 6);
  EXPECT_EQ(p->rank_bytes[0], in.dense_resident_bytes + 6 * in.expert_slot_bytes);
  const double u = p->used_experts(0, 1);
  EXPECT_DOUBLE_EQ(p->hit_rate(0, 1), (6 - u) / (16 - u));
  EXPECT_GT(p->disk_s(0, 1), 0.0);
  // A budget of exactly the share's bytes (its 16 experts and the dense part): all in memory.
  in.ranks[0].mem_cap_bytes = (8u << 20) + (16u << 20);
  p = plan_expert_parallel(in);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->streams(0));
  // A larger pool finds more of the experts and reads less.
  in.ranks[0].mem_cap_bytes = in.dense_resident_bytes + 12 * in.expert_slot_bytes;
  StatusOr<ExpertParallelPlan> larger = plan_expert_parallel(in);
  ASSERT_TRUE(larger.ok());
  ASSERT_TRUE(larger->streams(0));
  EXPECT_EQ(larger->slots[0], 12);
  EXPECT_GT(larger->hit_rate(0, 1), (6 - u) / (16 - u));
  EXPECT_LT(larger->disk_s(0, 1), (1 - (6 - u) / (16 - u)) * u * (1 << 20) / 1e9);
}

// Below the resident part and one routed layer's share of slots, streaming
// cannot work: the refusal gives that least budget. Without a budget or a
// measured disk a rank does not stream at all, and says why.
TEST(ExpertParallelPlan, RefusesAShareThatCannotStreamWithTheLeastBudget) {
  ExpertParallelInputs in = inputs(2);
  in.ranks[1].mem_cap_bytes = 3 * in.expert_slot_bytes;  // a share is 4 experts
  in.ranks[1].budget_given = true;
  StatusOr<ExpertParallelPlan> p = plan_expert_parallel(in);
  ASSERT_FALSE(p.ok());
  const std::string least = fmt::format("needs at least {:.2f} MiB", mib(4 * in.expert_slot_bytes));
  EXPECT_NE(p.status().message().find("rank 1 needs 16.0 MiB for experts 4-7"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find(least), std::string::npos) << p.status().message();
  in.ranks[1].mem_cap_bytes = 4 * in.expert_slot_bytes;
  EXPECT_TRUE(plan_expert_parallel(in).ok());
  in.ranks[1].disk_gbps = 0;
  p = plan_expert_parallel(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("its disk was not measured"), std::string::npos) << p.status().message();
  in.ranks[1].disk_gbps = 1;
  in.ranks[1].budget_given = false;
  p = plan_expert_parallel(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("only a rank given --mem-budget streams"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace sluice::plan
