// Randomized workloads: many sequences of mixed lengths under small block
// budgets, with shared prefixes, priorities, aborts (between and inside steps),
// forks, recompute and swap preemption, and speculative drafts (partly wrong,
// verified greedily, rejected slots rolled back). After every schedule() and update() the
// scheduler's and block manager's invariants must hold; at the end nothing may be
// held, and every sequence's tokens must equal what it generates alone.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/fake_runner_test_util.h"
#include "engine/scheduler.h"

namespace sluice {
namespace {

using testing::FakeRunner;
using testing::reference_generate;

constexpr int32_t kRandomVocab = 40;

class Rand {
 public:
  explicit Rand(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  // Uniform in [0, n).
  int below(int n) {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state_ >> 33) % static_cast<uint64_t>(n));
  }
  int range(int lo, int hi) { return lo + below(hi - lo + 1); }
  bool chance(int percent) { return below(100) < percent; }

 private:
  uint64_t state_;
};

struct Expected {
  std::vector<int32_t> start;    // tokens the reference run starts from
  std::vector<int32_t> before;   // generated tokens inherited from a fork parent
  int64_t max_tokens = 0;        // of the sequence, counting inherited ones
  std::vector<int32_t> stop_tokens;
};

struct Totals {
  int64_t preempt_recompute = 0, preempt_swap = 0, swap_ins = 0, prefix_hits = 0, cow = 0, evictions = 0;
  int64_t aborts = 0, forks = 0, finished = 0, chunked = 0, drafted = 0, accepted = 0;
};

// window > 0: every sequence runs under a sliding window (blocks released
// behind it) and the reference is the windowed fake model.
void run_workload(uint64_t seed, Totals* totals, int64_t window = 0) {
  Rand r(seed);
  const int64_t block_size = std::vector<int64_t>{1, 2, 4, 8}[static_cast<size_t>(r.below(4))];
  const SchedulerConfig sc{
      .max_batch_tokens = std::vector<int64_t>{5, 16, 64}[static_cast<size_t>(r.below(3))],
      .max_seqs = std::vector<int64_t>{2, 6, 64}[static_cast<size_t>(r.below(3))],
      .long_prefill_token_threshold = r.chance(30) ? 6 : 0,
      .preemption_mode = r.chance(50) ? PreemptionMode::kSwap : PreemptionMode::kRecompute,
      .watermark_blocks = r.chance(25) ? 1 : 0,
  };
  const int max_prompt = 30, max_gen = 20;
  // Small pools: the longest sequence just fits, so preemption is frequent.
  int64_t min_blocks = (max_prompt + max_gen - 1 + block_size - 1) / block_size;
  if (window > 0) {
    // What add() requires: the window's blocks and the longest chunk's.
    const int64_t chunk = sc.long_prefill_token_threshold > 0
                              ? std::min(sc.max_batch_tokens, sc.long_prefill_token_threshold)
                              : sc.max_batch_tokens;
    min_blocks = std::max(min_blocks, (window + block_size - 1) / block_size + 1 + (chunk + block_size - 1) / block_size);
  }
  const BlockManagerConfig bc{
      .n_blocks = min_blocks + r.below(static_cast<int>(min_blocks)),
      .block_size = block_size,
      .n_host_blocks = std::vector<int64_t>{0, min_blocks / 2, 4 * min_blocks}[static_cast<size_t>(r.below(3))],
      .enable_prefix_caching = r.chance(75),
      .window = window,
  };
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " block_size " << block_size << " blocks " << bc.n_blocks
                                    << " host " << bc.n_host_blocks << " budget " << sc.max_batch_tokens
                                    << " max_seqs " << sc.max_seqs << " swap "
                                    << (sc.preemption_mode == PreemptionMode::kSwap) << " caching "
                                    << bc.enable_prefix_caching << " window " << window);
  Scheduler sched(sc, bc);
  FakeRunner runner(bc.n_blocks, bc.n_host_blocks, bc.block_size, kRandomVocab);

  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    for (int i = r.range(4, 20); i > 0; --i) p.push_back(r.below(kRandomVocab));
  }
  std::map<SeqId, Expected> expected;
  std::map<SeqId, Sequence> finished;
  const int n_seqs = 40;
  SeqId next_id = 0;
  SeqId next_fork_id = 1000;

  auto check = [&](const char* when) {
    const Status st = sched.check_invariants();
    ASSERT_TRUE(st.ok()) << when << ": " << st.to_string();
  };
  for (int step = 0; next_id < n_seqs || sched.has_unfinished(); ++step) {
    ASSERT_LT(step, 20000) << "no progress";
    // Arrivals.
    for (int k = r.below(3); k > 0 && next_id < n_seqs; --k) {
      SequenceParams p;
      if (r.chance(60)) p.prompt = prefixes[static_cast<size_t>(r.below(3))];
      for (int i = r.range(p.prompt.empty() ? 1 : 0, 10); i > 0; --i) p.prompt.push_back(r.below(kRandomVocab));
      p.prompt.resize(std::min<size_t>(p.prompt.size(), max_prompt));
      p.stop.max_tokens = r.range(1, max_gen);
      if (r.chance(30)) p.stop.stop_tokens = {0};
      if (r.chance(20)) p.priority = r.range(-1, 2);
      expected[next_id] = {.start = p.prompt, .max_tokens = p.stop.max_tokens, .stop_tokens = p.stop.stop_tokens};
      ASSERT_TRUE(sched.add(next_id++, std::move(p)).ok());
    }
    // Between-step events: abort, fork.
    if (sched.has_unfinished() && r.chance(3)) {
      const SeqId victim = r.below(static_cast<int>(next_id));
      if (sched.find(victim)) {
        ASSERT_TRUE(sched.abort(victim).ok());
        ++totals->aborts;
      }
    }
    if (!sched.running().empty() && r.chance(4)) {
      const SeqId parent = sched.running()[static_cast<size_t>(r.below(static_cast<int>(sched.running().size())))];
      const Sequence p = *sched.find(parent);
      if (sched.fork(parent, next_fork_id).ok()) {
        // The child keeps every token the parent generated so far, then runs
        // its own model stream (the fake model is keyed by sequence id).
        expected[next_fork_id] = {.start = p.tokens,
                                  .before = std::vector<int32_t>(p.generated().begin(), p.generated().end()),
                                  .max_tokens = p.stop.max_tokens,
                                  .stop_tokens = p.stop.stop_tokens};
        ++next_fork_id;
        ++totals->forks;
      }
    }
    // Drafts for some decoding sequences.
    const bool drafting = seed % 2 == 0;
    for (const SeqId id : sched.running()) {
      const Sequence& s = *sched.find(id);
      if (!drafting || s.n_committed() - s.n_computed != 1 || !r.chance(60)) continue;
      const std::vector<int32_t> draft = testing::fake_draft(id, s.committed(), r.range(1, 6), 25, kRandomVocab, r);
      ASSERT_TRUE(sched.set_draft(id, draft).ok());
    }
    check("before schedule");
    const StepPlan plan = sched.schedule();
    check("after schedule");
    testing::expect_plan_within_limits(plan, sc);
    if (sched.has_unfinished()) {
      ASSERT_FALSE(plan.empty()) << "an unfinished scheduler planned nothing at step " << step;
    }
    for (const ScheduledSeq& s : plan.seqs) totals->chunked += (!s.sample && s.tokens.size() > 1) ? 1 : 0;
    const StepOutput out = runner.run(plan, sched.blocks());
    if (!plan.seqs.empty() && r.chance(3)) {
      ASSERT_TRUE(sched.abort(plan.seqs[static_cast<size_t>(r.below(static_cast<int>(plan.seqs.size())))].id).ok());
      ++totals->aborts;
    }
    const Status st = sched.update(out);
    ASSERT_TRUE(st.ok()) << st.to_string();
    check("after update");
    for (Sequence& s : sched.take_finished()) finished.emplace(s.id, std::move(s));
  }

  // Nothing is held: every block is free or cached, every host slot free.
  const BlockStats bs = sched.blocks().stats();
  EXPECT_EQ(bs.n_used, 0);
  EXPECT_EQ(bs.n_host_used, 0);
  EXPECT_EQ(bs.n_free + bs.n_cached, bs.n_total);
  EXPECT_EQ(sched.blocks().n_seqs(), 0);
  if (!bc.enable_prefix_caching) {
    EXPECT_EQ(bs.n_cached, 0);
  }

  // Outputs equal the unbatched reference (a prefix of it when aborted).
  ASSERT_EQ(finished.size(), expected.size());
  for (const auto& [id, e] : expected) {
    const Sequence& s = finished.at(id);
    std::vector<int32_t> want = e.before;
    const std::vector<int32_t> rest =
        reference_generate(id, e.start, e.max_tokens - static_cast<int64_t>(e.before.size()), e.stop_tokens, kRandomVocab,
                           window);
    want.insert(want.end(), rest.begin(), rest.end());
    const std::vector<int32_t> got(s.generated().begin(), s.generated().end());
    if (s.finish_reason == FinishReason::kAbort) {
      ASSERT_LE(got.size(), want.size()) << "seq " << id;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "aborted seq " << id;
    } else {
      EXPECT_EQ(got, want) << "seq " << id << " (" << finish_reason_name(s.finish_reason) << ")";
    }
  }
  const SchedulerStats ss = sched.stats();
  totals->preempt_recompute += ss.n_preempted_recompute;
  totals->preempt_swap += ss.n_preempted_swap;
  totals->swap_ins += ss.n_swapped_in;
  totals->prefix_hits += bs.n_prefix_hit_tokens;
  totals->cow += bs.n_cow_copies;
  totals->evictions += bs.n_evictions;
  totals->finished += ss.n_finished;
  totals->drafted += runner.n_drafted;
  totals->accepted += runner.n_accepted;
}

TEST(SchedulerRandomTest, WorkloadsMatchUnbatchedRunsWithInvariantsAfterEveryStep) {
  Totals totals;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    run_workload(seed, &totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The workloads must actually exercise every mechanism.
  EXPECT_GT(totals.preempt_recompute, 0);
  EXPECT_GT(totals.preempt_swap, 0);
  EXPECT_GT(totals.swap_ins, 0);
  EXPECT_GT(totals.prefix_hits, 0);
  EXPECT_GT(totals.cow, 0);
  EXPECT_GT(totals.evictions, 0);
  EXPECT_GT(totals.aborts, 0);
  EXPECT_GT(totals.forks, 0);
  EXPECT_GT(totals.chunked, 0);
  EXPECT_GT(totals.accepted, 0);
  EXPECT_LT(totals.accepted, totals.drafted);
  std::printf("60 workloads: %lld finished, %lld recompute + %lld swap preemptions, %lld swap-ins, "
              "%lld prefix-hit tokens, %lld CoW copies, %lld evictions, %lld aborts, %lld forks, "
              "%lld of %lld drafts accepted\n",
              static_cast<long long>(totals.finished), static_cast<long long>(totals.preempt_recompute),
              static_cast<long long>(totals.preempt_swap), static_cast<long long>(totals.swap_ins),
              static_cast<long long>(totals.prefix_hits), static_cast<long long>(totals.cow),
              static_cast<long long>(totals.evictions), static_cast<long long>(totals.aborts),
              static_cast<long long>(totals.forks), static_cast<long long>(totals.accepted),
              static_cast<long long>(totals.drafted));
}

// The same workloads under sliding windows of 3, 7 and 12 positions: blocks
// behind the window are released as sequences advance, and every mechanism
// above (shared prefixes, forks, both preemptions, drafts, aborts) still gives
// each sequence what it generates alone.
TEST(SchedulerRandomTest, WindowedWorkloadsMatchUnbatchedWindowedRuns) {
  Totals totals;
  for (uint64_t seed = 1; seed <= 45; ++seed) {
    run_workload(seed, &totals, std::vector<int64_t>{3, 7, 12}[seed % 3]);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(totals.preempt_recompute + totals.preempt_swap, 0);
  EXPECT_GT(totals.prefix_hits, 0);
  EXPECT_GT(totals.forks, 0);
  EXPECT_GT(totals.accepted, 0);
  std::printf("45 windowed workloads: %lld finished, %lld recompute + %lld swap preemptions, %lld prefix-hit tokens, "
              "%lld forks, %lld of %lld drafts accepted\n",
              static_cast<long long>(totals.finished), static_cast<long long>(totals.preempt_recompute),
              static_cast<long long>(totals.preempt_swap), static_cast<long long>(totals.prefix_hits),
              static_cast<long long>(totals.forks), static_cast<long long>(totals.accepted),
              static_cast<long long>(totals.drafted));
}

}  // namespace
}  // namespace sluice
