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
                          .expert_slot_bytes = (1 << 20) + (12 << 10), .dense_resident_bytes = (8 << 20) + (64 << 10),
                          .attention = EpAttention::kRank0};
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
  // A rank that does not route reads ahead what rank 0 predicts:
  // hit rate = (slots - u) / (layers x share - u), u = 4 x 2/8 = 1 at one token.
  EXPECT_DOUBLE_EQ(p->hit_rate(1, 1), (static_cast<double>(p->slots[1]) - 1.0) / 15.0);
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


// Attention on every rank, worked by hand for 2 ranks alike (inputs(2)), a
// decode token: each rank runs u = 4 x (1 - 0.75) = 1 expert per routed
// layer, t = 1 MiB / 10 GB/s = 104.8576 us (its 1 row's 20 us of compute
// hide under the read); the rest reads 6 MiB at 10 GB/s = 629.1456 us.
//   rank 0:  link = 2 x 50 us + (16 + 260 + 256) B / 1 GB/s = 100.532 us
//            step = 629.1456 + 4 x (104.8576 + 100.532)       = 1450.704 us
//   every:   exchange = 50 us + max(1 x 256, 512 - 256) B / 1 GB/s = 50.256 us
//            step = 629.1456 + 50 (the step's description) + 4 x (104.8576 + 50.256) = 1299.6 us
TEST(ExpertParallelPlan, AttentionOnEveryRankWorkedByHand) {
  ExpertParallelInputs in = inputs(2);
  in.attention = EpAttention::kRank0;
  StatusOr<ExpertParallelPlan> r0 = plan_expert_parallel(in);
  in.attention = EpAttention::kEvery;
  StatusOr<ExpertParallelPlan> ev = plan_expert_parallel(in);
  ASSERT_TRUE(r0.ok() && ev.ok());
  EXPECT_FALSE(r0->every());
  EXPECT_TRUE(ev->every());
  EXPECT_NEAR(r0->link_s(1, 1), 100.532e-6, 1e-12);
  EXPECT_NEAR(r0->step_s(1), 1450.704e-6, 1e-12);
  EXPECT_EQ(r0->exchange_s(1), 0.0);
  EXPECT_NEAR(ev->exchange_s(1), 50.256e-6, 1e-12);
  EXPECT_NEAR(ev->step_s(1), 1299.6e-6, 1e-12);
  EXPECT_NEAR(ev->network_s(1), 50e-6 + 4 * 50.256e-6, 1e-12);
  // Rank 0 sends its outputs and gets rank 1's: 256 B each way.
  EXPECT_DOUBLE_EQ(ev->bytes_out(1, 1), 256.0);
  EXPECT_DOUBLE_EQ(ev->bytes_back(1, 1), 256.0);
  // Every rank holds the rest of the model beside its share.
  EXPECT_EQ(ev->rank_bytes[1], (8u << 20) + 16u * (1u << 20));
  EXPECT_EQ(r0->rank_bytes[1], 16u * (1u << 20));
  EXPECT_NE(ev->attention_why.find("--ep-attention every"), std::string::npos) << ev->attention_why;
  // auto takes the faster: every.
  in.attention = EpAttention::kAuto;
  StatusOr<ExpertParallelPlan> au = plan_expert_parallel(in);
  ASSERT_TRUE(au.ok());
  EXPECT_TRUE(au->every());
  EXPECT_NEAR(au->every_decode_s, 1299.6e-6, 1e-12);
  EXPECT_NEAR(au->rank0_decode_s, 1450.704e-6, 1e-12);
  EXPECT_NE(au->attention_why.find("1.300 ms/token with attention on every rank, 1.451 ms on rank 0"),
            std::string::npos)
      << au->attention_why;
}

// A slower rank 1 (read rate x GB/s < 10, a = 1 MiB / x its expert's read):
// every = 6a (its rest) + 50 us + 4 x (a + 50.256 us) = 10a + 251.024 us;
// rank 0 = 629.1456 us + 4 x (a + 100.532 us) = 4a + 1031.2736 us. Equal at
// a = 130.0416 us, x = 8.0634 GB/s: above it every rank runs attention,
// below it rank 0 does.
TEST(ExpertParallelPlan, TheChoiceFlipsWhereTheFormulasSay) {
  ExpertParallelInputs in = inputs(2);
  in.attention = EpAttention::kAuto;
  const double x_flip = (1 << 20) / 130.0416e-6 / 1e9;
  for (double x : {8.5, 8.1, 8.0, 7.5}) {
    in.ranks[1].read_gbps = x;
    StatusOr<ExpertParallelPlan> p = plan_expert_parallel(in);
    ASSERT_TRUE(p.ok());
    const double a = (1 << 20) / (x * 1e9);
    EXPECT_NEAR(p->every_decode_s, 10 * a + 251.024e-6, 1e-12) << x;
    EXPECT_NEAR(p->rank0_decode_s, 4 * a + 1031.2736e-6, 1e-12) << x;
    EXPECT_EQ(p->every(), x > x_flip) << x << " GB/s: " << p->attention_why;
  }
}

// Attention on every rank needs each worker to hold the rest of the model
// and a KV pool besides its share: auto falls back to rank 0 and says why;
// asked for, it is refused with the rank's need.
TEST(ExpertParallelPlan, AttentionOnEveryRankMustFitEveryRank) {
  ExpertParallelInputs in = inputs(2);
  in.attention = EpAttention::kAuto;
  in.kv_bytes = 4u << 20;
  in.ranks[1].mem_cap_bytes = (16u << 20) + (8u << 20) + (4u << 20) - 1;  // one byte short
  StatusOr<ExpertParallelPlan> p = plan_expert_parallel(in);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->every());
  EXPECT_EQ(p->every_decode_s, 0.0);
  EXPECT_NE(p->attention_why.find("attention on every rank does not fit: "), std::string::npos) << p->attention_why;
  EXPECT_NE(p->attention_why.find("a KV pool of 4.0 MiB"), std::string::npos) << p->attention_why;
  in.attention = EpAttention::kEvery;
  p = plan_expert_parallel(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cannot be split over 2 ranks that fit with attention on every rank"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("rank 1 needs 28.0 MiB"), std::string::npos) << p.status().message();
  in.ranks[1].mem_cap_bytes += 1;
  p = plan_expert_parallel(in);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->every());
  // Under its budget (for weights alone, as rank 0's: the KV pool is beside
  // it) the worker streams its share beside the rest, and predicts its
  // routing as rank 0 does (it routes too).
  in.ranks[1].budget_given = true;
  in.ranks[1].mem_cap_bytes = in.dense_resident_bytes + 6 * in.expert_slot_bytes;
  p = plan_expert_parallel(in);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->streams(1));
  EXPECT_EQ(p->slots[1], 6);
  const double u = p->used_experts(1, 1);
  EXPECT_DOUBLE_EQ(p->hit_rate(1, 1), (6 - u) / (16 - u));
}

TEST(ExpertParallelPlan, ParsesTheAttentionFlag) {
  for (EpAttention a : {EpAttention::kAuto, EpAttention::kRank0, EpAttention::kEvery}) {
    StatusOr<EpAttention> got = parse_ep_attention(ep_attention_name(a));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, a);
  }
  StatusOr<EpAttention> bad = parse_ep_attention("all");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown --ep-attention 'all'"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace sluice::plan
