#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <vector>

#include "engine/fake_runner_test_util.h"

namespace sluice {
namespace {

using testing::Driver;
using testing::reference_generate;

constexpr int32_t kVocab = 50;

std::vector<int32_t> make_prompt(int n, int32_t salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (salt * 7 + i * 3) % kVocab;
  return p;
}

std::vector<int32_t> generated_of(const Sequence& s) { return {s.generated().begin(), s.generated().end()}; }

// Every finished sequence produced what it would have alone.
void expect_reference_outputs(const Driver& d, const std::map<SeqId, SequenceParams>& params) {
  for (const auto& [id, p] : params) {
    auto it = d.finished.find(id);
    ASSERT_NE(it, d.finished.end()) << "seq " << id << " did not finish";
    EXPECT_EQ(generated_of(it->second), reference_generate(id, p.prompt, p.stop.max_tokens, p.stop.stop_tokens, kVocab))
        << "seq " << id;
  }
}

TEST(SequenceTest, AppendGeneratedStopsAtStopTokenOrLength) {
  Sequence s = Sequence::from_params(1, {.prompt = {1, 2}, .stop = {.stop_tokens = {9}, .max_tokens = 3}}, 0);
  EXPECT_EQ(s.n_total(), 2);
  EXPECT_EQ(s.append_generated(std::vector<int32_t>{4}), FinishReason::kNone);
  EXPECT_EQ(s.append_generated(std::vector<int32_t>{9, 5}), FinishReason::kStop);
  EXPECT_EQ(generated_of(s), (std::vector<int32_t>{4, 9}));
  Sequence t = Sequence::from_params(2, {.prompt = {1}, .stop = {.max_tokens = 2}}, 1);
  EXPECT_EQ(t.append_generated(std::vector<int32_t>{3, 4, 5}), FinishReason::kLength);
  EXPECT_EQ(generated_of(t), (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(schedules_before(s, t));
  t.priority = 1;
  EXPECT_TRUE(schedules_before(t, s));
  EXPECT_FALSE(validate_sequence_params({.prompt = {}}).ok());
  EXPECT_FALSE(validate_sequence_params({.prompt = {1}, .stop = {.max_tokens = 0}}).ok());
}

TEST(SchedulerTest, ChunkedPrefillInterleavesWithDecodeUnderTheBudget) {
  Driver d({.max_batch_tokens = 8}, {.n_blocks = 64, .block_size = 4}, kVocab);
  std::map<SeqId, SequenceParams> params = {{1, {.prompt = make_prompt(3, 1), .stop = {.max_tokens = 20}}},
                                            {2, {.prompt = make_prompt(30, 2), .stop = {.max_tokens = 5}}}};
  ASSERT_TRUE(d.sched.add(1, params[1]).ok());
  StepPlan p = d.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].tokens.size(), 3u);
  EXPECT_TRUE(p.seqs[0].sample);
  ASSERT_TRUE(d.sched.add(2, params[2]).ok());
  int64_t pos = 0;
  std::vector<size_t> chunks;
  while (pos < 30) {
    p = d.step();
    ASSERT_EQ(p.seqs.size(), 2u);
    EXPECT_EQ(p.seqs[0].id, 1);  // running first: one decode token
    EXPECT_EQ(p.seqs[0].tokens.size(), 1u);
    EXPECT_TRUE(p.seqs[0].sample);
    EXPECT_EQ(p.seqs[1].id, 2);
    EXPECT_EQ(p.seqs[1].pos0, pos);
    pos += static_cast<int64_t>(p.seqs[1].tokens.size());
    EXPECT_EQ(p.seqs[1].sample, pos == 30);
    EXPECT_LE(p.n_batch_tokens, 8);
    chunks.push_back(p.seqs[1].tokens.size());
  }
  EXPECT_EQ(chunks, (std::vector<size_t>{7, 7, 7, 7, 2}));
  ASSERT_TRUE(d.run_to_completion(100));
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, LongPrefillThresholdCapsEachChunk) {
  Driver d({.max_batch_tokens = 512, .long_prefill_token_threshold = 5}, {.n_blocks = 32, .block_size = 4},
           kVocab);
  std::map<SeqId, SequenceParams> params = {{1, {.prompt = make_prompt(23, 3), .stop = {.max_tokens = 4}}}};
  ASSERT_TRUE(d.sched.add(1, params[1]).ok());
  std::vector<size_t> chunks;
  for (int i = 0; i < 5; ++i) chunks.push_back(d.step().seqs.at(0).tokens.size());
  EXPECT_EQ(chunks, (std::vector<size_t>{5, 5, 5, 5, 3}));
  ASSERT_TRUE(d.run_to_completion(100));
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, PrefixHitStartsComputationAtTheCachedLength) {
  Driver d({}, {.n_blocks = 32, .block_size = 4}, kVocab);
  const std::vector<int32_t> shared = make_prompt(16, 4);
  std::map<SeqId, SequenceParams> params;
  params[1] = {.prompt = shared, .stop = {.max_tokens = 3}};
  params[1].prompt.push_back(1);
  params[1].prompt.push_back(2);
  params[2] = {.prompt = shared, .stop = {.max_tokens = 3}};
  params[2].prompt.push_back(3);
  params[3] = {.prompt = shared, .stop = {.max_tokens = 4}};
  params[3].prompt.push_back(4);

  // Two live sequences share the prefix blocks.
  ASSERT_TRUE(d.sched.add(1, params[1]).ok());
  const StepPlan p1 = d.step();
  ASSERT_TRUE(d.sched.add(2, params[2]).ok());
  const StepPlan p2 = d.step();
  ASSERT_EQ(p2.seqs.size(), 2u);
  const ScheduledSeq& s2 = p2.seqs[1];
  EXPECT_EQ(s2.id, 2);
  EXPECT_EQ(s2.pos0, 16);
  EXPECT_EQ(s2.tokens.size(), 1u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s2.block_table[static_cast<size_t>(i)], p1.seqs[0].block_table[static_cast<size_t>(i)]);
    EXPECT_EQ(d.sched.blocks().pool().ref_count(s2.block_table[static_cast<size_t>(i)]), 2);
  }
  ASSERT_TRUE(d.run_to_completion(100));
  EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
  EXPECT_GE(d.sched.blocks().stats().n_cached, 4);

  // After both finish the blocks are cached and a third sequence hits them.
  ASSERT_TRUE(d.sched.add(3, params[3]).ok());
  const StepPlan p3 = d.step();
  EXPECT_EQ(p3.seqs.at(0).pos0, 16);
  EXPECT_EQ(d.sched.blocks().stats().n_prefix_hit_tokens, 32);
  ASSERT_TRUE(d.run_to_completion(100));
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, RecomputePreemptsTheNewestAndEveryoneFinishesCorrectly) {
  // 6 blocks of 4: three sequences of 4 prompt tokens fit until each needs a
  // third block (9 tokens).
  Driver d({}, {.n_blocks = 6, .block_size = 4}, kVocab);
  std::map<SeqId, SequenceParams> params;
  for (SeqId id = 1; id <= 3; ++id) {
    params[id] = {.prompt = make_prompt(4, static_cast<int32_t>(id)), .stop = {.max_tokens = 8}};
    ASSERT_TRUE(d.sched.add(id, params[id]).ok());
  }
  std::vector<SeqId> preempted;
  for (int i = 0; i < 200 && d.sched.has_unfinished(); ++i) {
    const StepPlan p = d.step();
    ASSERT_FALSE(p.empty());
    EXPECT_TRUE(p.swap_out.empty());
    for (const SeqId id : p.preempted) {
      if (preempted.empty()) {
        const Sequence* s = d.sched.find(id);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->state, SeqState::kWaiting);
        EXPECT_EQ(s->n_computed, 0);
        EXPECT_EQ(d.sched.waiting().front(), id) << "back at the front of the queue";
      }
      preempted.push_back(id);
    }
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), 3) << "the newest goes first";
  EXPECT_EQ(d.finished.at(1).n_preemptions, 0);
  EXPECT_GE(d.sched.stats().n_preempted_recompute, 1);
  expect_reference_outputs(d, params);
  EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
}

TEST(SchedulerTest, SwapPreemptionMovesBlocksOutAndBackIn) {
  for (const bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching" : "no prefix caching");
    Driver d({.preemption_mode = PreemptionMode::kSwap},
             {.n_blocks = 6, .block_size = 4, .n_host_blocks = 8, .enable_prefix_caching = caching}, kVocab);
    std::map<SeqId, SequenceParams> params;
    for (SeqId id = 1; id <= 3; ++id) {
      params[id] = {.prompt = make_prompt(4, static_cast<int32_t>(id)), .stop = {.max_tokens = 8}};
      ASSERT_TRUE(d.sched.add(id, params[id]).ok());
    }
    bool saw_swap_out = false, saw_swap_in = false;
    for (int i = 0; i < 200 && d.sched.has_unfinished(); ++i) {
      const StepPlan p = d.step();
      if (!p.swap_out.empty() && !saw_swap_out) {
        saw_swap_out = true;
        ASSERT_EQ(p.preempted.size(), 1u);
        EXPECT_EQ(p.preempted[0], 3);
        const Sequence* s = d.sched.find(3);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->state, SeqState::kSwapped);
        EXPECT_GT(s->n_computed, 0) << "swap keeps the computed rows";
        EXPECT_EQ(d.sched.blocks().stats().n_host_used, static_cast<int64_t>(p.swap_out.size()));
      }
      saw_swap_in |= !p.swap_in.empty();
    }
    EXPECT_TRUE(saw_swap_out);
    EXPECT_TRUE(saw_swap_in);
    EXPECT_FALSE(d.sched.has_unfinished());
    EXPECT_EQ(d.sched.stats().n_preempted_recompute, 0);
    expect_reference_outputs(d, params);
    EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
    EXPECT_EQ(d.sched.blocks().stats().n_host_used, 0);
  }
}

TEST(SchedulerTest, SwapFallsBackToRecomputeWhenTheHostPoolIsFull) {
  Driver d({.preemption_mode = PreemptionMode::kSwap}, {.n_blocks = 6, .block_size = 4, .n_host_blocks = 1},
           kVocab);
  std::map<SeqId, SequenceParams> params;
  for (SeqId id = 1; id <= 3; ++id) {
    params[id] = {.prompt = make_prompt(4, static_cast<int32_t>(id)), .stop = {.max_tokens = 8}};
    ASSERT_TRUE(d.sched.add(id, params[id]).ok());
  }
  ASSERT_TRUE(d.run_to_completion(200));
  EXPECT_EQ(d.sched.stats().n_preempted_swap, 0);
  EXPECT_GE(d.sched.stats().n_preempted_recompute, 1);
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, WatermarkHoldsBackAdmissionOnlyWhileOthersRun) {
  Driver d({.watermark_blocks = 1}, {.n_blocks = 4, .block_size = 4}, kVocab);
  std::map<SeqId, SequenceParams> params = {{1, {.prompt = make_prompt(4, 1), .stop = {.max_tokens = 3}}},
                                            {2, {.prompt = make_prompt(12, 2), .stop = {.max_tokens = 1}}},
                                            {3, {.prompt = make_prompt(16, 3), .stop = {.max_tokens = 1}}}};
  for (const auto& [id, p] : params) ASSERT_TRUE(d.sched.add(id, p).ok());
  const StepPlan p = d.step();
  ASSERT_EQ(p.seqs.size(), 1u) << "seq 2 would leave no block spare";
  EXPECT_EQ(d.sched.waiting().front(), 2);
  // Alone, even a sequence taking the whole pool is admitted.
  ASSERT_TRUE(d.run_to_completion(50));
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, HigherPriorityFirstThenArrivalOrder) {
  Driver d({.max_seqs = 1}, {.n_blocks = 16, .block_size = 4}, kVocab);
  std::map<SeqId, SequenceParams> params = {{1, {.prompt = make_prompt(5, 1), .stop = {.max_tokens = 3}}},
                                            {2, {.prompt = make_prompt(5, 2), .stop = {.max_tokens = 3}}},
                                            {3, {.prompt = make_prompt(5, 3), .stop = {.max_tokens = 3}, .priority = 5}},
                                            {4, {.prompt = make_prompt(5, 4), .stop = {.max_tokens = 3}, .priority = -1}}};
  for (const auto& [id, p] : params) ASSERT_TRUE(d.sched.add(id, p).ok());
  EXPECT_EQ(d.sched.waiting(), (std::vector<SeqId>{3, 1, 2, 4}));
  std::vector<SeqId> order;
  for (int i = 0; i < 100 && d.sched.has_unfinished(); ++i) {
    const StepPlan p = d.step();
    ASSERT_EQ(p.seqs.size(), 1u);
    if (order.empty() || order.back() != p.seqs[0].id) order.push_back(p.seqs[0].id);
  }
  EXPECT_EQ(order, (std::vector<SeqId>{3, 1, 2, 4}));
  expect_reference_outputs(d, params);
}

TEST(SchedulerTest, AbortReleasesBlocksInEveryState) {
  Driver d({.max_seqs = 2}, {.n_blocks = 16, .block_size = 4}, kVocab);
  for (SeqId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(d.sched.add(id, {.prompt = make_prompt(6, static_cast<int32_t>(id)), .stop = {.max_tokens = 10}}).ok());
  }
  d.step();
  EXPECT_EQ(d.sched.n_running(), 2);
  EXPECT_EQ(d.sched.abort(9).code(), StatusCode::kNotFound);
  ASSERT_TRUE(d.sched.abort(4).ok());  // waiting
  ASSERT_TRUE(d.sched.abort(1).ok());  // running, between steps
  d.check("after abort");
  EXPECT_EQ(d.sched.blocks().n_seqs(), 1);
  // Inside a step: the blocks stay until update, the output is dropped.
  StepPlan p = d.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 2u);  // 2 continues, 3 is admitted
  ASSERT_TRUE(d.sched.abort(2).ok());
  EXPECT_TRUE(d.sched.blocks().has_seq(2));
  StepOutput out = d.runner.run(p, d.sched.blocks());
  ASSERT_TRUE(d.sched.update(out).ok());
  d.check("after update");
  d.collect();
  EXPECT_FALSE(d.sched.blocks().has_seq(2));
  for (const SeqId id : {1, 2, 4}) {
    ASSERT_TRUE(d.finished.count(id));
    EXPECT_EQ(d.finished.at(id).finish_reason, FinishReason::kAbort);
  }
  EXPECT_EQ(d.finished.at(2).n_generated(), 1) << "the aborted step's token is not appended";
  ASSERT_TRUE(d.sched.abort(3).ok());
  EXPECT_FALSE(d.sched.has_unfinished());
  EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
  EXPECT_EQ(d.sched.stats().n_aborted, 4);
  d.check("at the end");
}

TEST(SchedulerTest, ForkSharesThePrefixAndCopiesOnFirstWrite) {
  Driver d({.max_batch_tokens = 4}, {.n_blocks = 16, .block_size = 4}, kVocab);
  const std::vector<int32_t> prompt = make_prompt(6, 9);
  ASSERT_TRUE(d.sched.add(1, {.prompt = prompt, .stop = {.max_tokens = 6}}).ok());
  d.step();  // 4 of 6 prompt tokens
  EXPECT_FALSE(d.sched.fork(1, 2).ok()) << "still in prefill";
  d.step();  // the rest, first token sampled
  StepPlan p = d.sched.schedule();
  EXPECT_FALSE(d.sched.fork(1, 2).ok()) << "a step is in flight";
  ASSERT_TRUE(d.sched.update(d.runner.run(p, d.sched.blocks())).ok());
  ASSERT_TRUE(d.sched.fork(1, 2).ok());
  EXPECT_EQ(d.sched.fork(1, 2).code(), StatusCode::kInvalidArgument);
  d.check("after fork");
  const Sequence parent = *d.sched.find(1);
  EXPECT_EQ(d.sched.find(2)->tokens, parent.tokens);
  EXPECT_EQ(d.sched.blocks().pool().ref_count(d.sched.blocks().block_table(1)[0]), 2);

  p = d.step();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.copies.size(), 1u) << "the shared partial block is copied once";
  ASSERT_TRUE(d.run_to_completion(100));
  const int64_t n_gen = parent.n_generated();
  EXPECT_EQ(generated_of(d.finished.at(1)), reference_generate(1, prompt, 6, {}, kVocab));
  // The child continues from the parent's tokens with its own model stream.
  std::vector<int32_t> child = generated_of(parent);
  const std::vector<int32_t> rest = reference_generate(2, parent.tokens, 6 - n_gen, {}, kVocab);
  child.insert(child.end(), rest.begin(), rest.end());
  EXPECT_EQ(generated_of(d.finished.at(2)), child);
  EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
}

TEST(SchedulerTest, StopTokenAndMaxTokensFinish) {
  Driver d({}, {.n_blocks = 16, .block_size = 4}, kVocab);
  const std::vector<int32_t> prompt = make_prompt(5, 5);
  const std::vector<int32_t> ref = reference_generate(1, prompt, 10, {}, kVocab);
  ASSERT_TRUE(d.sched.add(1, {.prompt = prompt, .stop = {.stop_tokens = {ref[2]}, .max_tokens = 10}}).ok());
  ASSERT_TRUE(d.sched.add(2, {.prompt = prompt, .stop = {.max_tokens = 2}}).ok());
  ASSERT_TRUE(d.run_to_completion(50));
  const Sequence& s1 = d.finished.at(1);
  EXPECT_EQ(s1.finish_reason, FinishReason::kStop);
  EXPECT_LE(s1.n_generated(), 3);
  EXPECT_EQ(s1.generated().back(), ref[2]);
  EXPECT_EQ(d.finished.at(2).finish_reason, FinishReason::kLength);
  EXPECT_EQ(d.finished.at(2).n_generated(), 2);
}

TEST(SchedulerTest, UpdateRejectsMismatchedOutputsWithoutChangingState) {
  Driver d({}, {.n_blocks = 16, .block_size = 4}, kVocab);
  ASSERT_TRUE(d.sched.add(1, {.prompt = make_prompt(3, 1), .stop = {.max_tokens = 5}}).ok());
  ASSERT_TRUE(d.sched.add(2, {.prompt = make_prompt(3, 2), .stop = {.max_tokens = 5}}).ok());
  EXPECT_FALSE(d.sched.update({.seqs = {{.id = 1, .tokens = {1}}}}).ok()) << "no step in flight";
  EXPECT_TRUE(d.sched.update({}).ok());
  StepPlan p = d.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_FALSE(d.sched.update({.seqs = {{.id = 1, .tokens = {1}}}}).ok()) << "missing seq 2";
  EXPECT_FALSE(d.sched.update({.seqs = {{.id = 1, .tokens = {1}}, {.id = 1, .tokens = {1}}}}).ok());
  EXPECT_FALSE(d.sched.update({.seqs = {{.id = 1, .tokens = {1}}, {.id = 2, .tokens = {}}}}).ok());
  EXPECT_FALSE(
      d.sched.update({.seqs = {{.id = 1, .tokens = {1}}, {.id = 2, .tokens = {2}}, {.id = 7, .tokens = {3}}}}).ok());
  EXPECT_EQ(d.sched.find(1)->n_computed, 0);
  EXPECT_TRUE(d.sched.step_in_flight());
  ASSERT_TRUE(d.sched.update({.seqs = {{.id = 2, .tokens = {2}}, {.id = 1, .tokens = {1}}}}).ok());
  EXPECT_EQ(d.sched.find(1)->n_computed, 3);
  EXPECT_EQ(d.sched.find(1)->tokens.back(), 1);
  EXPECT_EQ(d.sched.find(2)->tokens.back(), 2);
  d.check("after update");
}

TEST(SchedulerTest, AddRefusesBadRequests) {
  Scheduler s({}, {.n_blocks = 4, .block_size = 4});
  EXPECT_FALSE(s.add(1, {.prompt = {}}).ok());
  EXPECT_FALSE(s.add(1, {.prompt = {1}, .stop = {.max_tokens = 0}}).ok());
  // 10 prompt + 7 generated (the 7th never computed) = 16 slots = 4 blocks: fits.
  EXPECT_TRUE(s.add(1, {.prompt = make_prompt(10, 1), .stop = {.max_tokens = 7}}).ok());
  EXPECT_EQ(s.add(2, {.prompt = make_prompt(10, 1), .stop = {.max_tokens = 8}}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.add(1, {.prompt = {1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.add(3, {.prompt = {1}, .stop = {.max_tokens = std::numeric_limits<int64_t>::max()}}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(s.add(4, {.prompt = make_prompt(17, 1), .stop = {.max_tokens = 1}}).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.n_waiting(), 1);
  EXPECT_FALSE(validate_scheduler_config({.max_batch_tokens = 0}, {.n_blocks = 4}).ok());
  EXPECT_FALSE(validate_scheduler_config({.max_seqs = 0}, {.n_blocks = 4}).ok());
  EXPECT_FALSE(validate_scheduler_config({}, {.n_blocks = 0}).ok());
  EXPECT_TRUE(validate_scheduler_config({}, {.n_blocks = 4}).ok());
}

TEST(SchedulerTest, DraftsAreComputedInOneChunkAndRejectedSlotsReleased) {
  Driver d({.max_batch_tokens = 16}, {.n_blocks = 16, .block_size = 4}, kVocab);
  const SequenceParams p{.prompt = make_prompt(5, 3), .stop = {.max_tokens = 12}};
  ASSERT_TRUE(d.sched.add(1, p).ok());
  // Not running yet, then in prefill: no drafts.
  EXPECT_EQ(d.sched.set_draft(1, std::vector<int32_t>{1}).status().code(), StatusCode::kNotFound);
  d.step();  // prefill; first token sampled
  const Sequence& s = *d.sched.find(1);
  ASSERT_EQ(s.n_generated(), 1);
  EXPECT_EQ(d.sched.blocks().n_tokens(1), 5);
  // Two right drafts then a wrong one: two accepted, the third replaced.
  struct AlwaysWrongAfter2 {
    int n = 0;
    bool chance(int) { return ++n > 2; }
  } r;
  const std::vector<int32_t> draft = testing::fake_draft(1, s.committed(), 3, 0, kVocab, r);
  ASSERT_EQ(d.sched.set_draft(1, draft).value(), 3);
  EXPECT_EQ(s.n_draft, 3);
  EXPECT_EQ(s.n_generated(), 1);
  StepPlan plan = d.step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].tokens.size(), 4u);  // the last token + 3 drafts
  EXPECT_EQ(plan.seqs[0].n_draft, 3);
  EXPECT_EQ(d.runner.n_accepted, 2);
  EXPECT_EQ(s.n_draft, 0);
  EXPECT_EQ(s.n_generated(), 4);                  // 1 + 2 accepted + 1 of the target's own
  EXPECT_EQ(s.n_computed, 8);                     // prompt + first token + 2 accepted drafts
  EXPECT_EQ(d.sched.blocks().n_tokens(1), 8);     // the rejected draft's slot is released
  EXPECT_EQ(d.sched.blocks().block_table(1).size(), 2u);
  // Drafts past max_tokens are dropped: 4 generated of 12, so at most 7 drafts.
  EXPECT_EQ(d.sched.set_draft(1, std::vector<int32_t>(20, 1)).value(), 7);
  // A budget of 16 keeps them; a new draft replaces the pending one.
  EXPECT_EQ(d.sched.set_draft(1, std::vector<int32_t>{1, 2}).value(), 2);
  EXPECT_EQ(s.n_total(), s.n_committed() + 2);
  d.run_to_completion(20);
  ASSERT_EQ(d.finished.count(1), 1u);
  EXPECT_EQ(generated_of(d.finished.at(1)), reference_generate(1, p.prompt, p.stop.max_tokens, {}, kVocab));
  EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
}

TEST(SchedulerTest, DraftsAreTrimmedToTheBudgetAndDroppedOnPreemption) {
  Driver d({.max_batch_tokens = 3}, {.n_blocks = 16, .block_size = 2}, kVocab);
  ASSERT_TRUE(d.sched.add(1, {.prompt = make_prompt(2, 1), .stop = {.max_tokens = 10}}).ok());
  d.step();
  ASSERT_EQ(d.sched.set_draft(1, std::vector<int32_t>{1, 2, 3, 4}).value(), 4);
  StepPlan plan = d.step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].n_draft, 2);  // 1 + 2 tokens fill the budget of 3
  EXPECT_EQ(plan.seqs[0].tokens.size(), 3u);
  // In flight: no drafts, no forks of a sequence with drafts pending.
  ASSERT_TRUE(d.sched.set_draft(1, std::vector<int32_t>{5}).ok());
  EXPECT_FALSE(d.sched.fork(1, 2).ok());
  StepPlan p2 = d.sched.schedule();
  EXPECT_EQ(d.sched.set_draft(1, std::vector<int32_t>{5}).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(d.sched.update(d.runner.run(p2, d.sched.blocks())).ok());
  d.check("after update");

  // Drafts that would need another sequence's blocks are dropped, not paid for
  // by preempting it: 3 blocks of 2; sequence 1 has a full block and needs one
  // more for its next token, sequence 2 has room in its own block.
  Driver f({.max_batch_tokens = 16}, {.n_blocks = 3, .block_size = 2}, kVocab);
  ASSERT_TRUE(f.sched.add(1, {.prompt = make_prompt(2, 1), .stop = {.max_tokens = 5}}).ok());
  ASSERT_TRUE(f.sched.add(2, {.prompt = make_prompt(1, 2), .stop = {.max_tokens = 5}}).ok());
  f.step();
  ASSERT_EQ(f.sched.n_running(), 2);
  ASSERT_EQ(f.sched.set_draft(1, std::vector<int32_t>{7, 7}).value(), 2);  // would need 2 new blocks, 1 is free
  StepPlan q = f.step();
  EXPECT_TRUE(q.preempted.empty());
  ASSERT_EQ(q.seqs.size(), 2u);
  EXPECT_EQ(q.seqs[0].n_draft, 0);
  EXPECT_TRUE(f.run_to_completion(20));

  // A preemption that happens anyway (sequence 1's next token needs the last
  // block, held by sequence 2) drops the victim's drafts with it.
  Driver e({.max_batch_tokens = 16}, {.n_blocks = 4, .block_size = 2}, kVocab);
  ASSERT_TRUE(e.sched.add(1, {.prompt = make_prompt(4, 1), .stop = {.max_tokens = 5}}).ok());
  ASSERT_TRUE(e.sched.add(2, {.prompt = make_prompt(3, 2), .stop = {.max_tokens = 5}}).ok());
  e.step();
  ASSERT_EQ(e.sched.n_running(), 2);
  ASSERT_TRUE(e.sched.set_draft(2, std::vector<int32_t>{7, 7}).ok());
  StepPlan p = e.step();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 2);
  const Sequence* two = e.sched.find(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->n_draft, 0);
  EXPECT_EQ(two->n_generated(), 1);
  EXPECT_TRUE(e.run_to_completion(40));
  EXPECT_EQ(e.n_invariant_failures, 0);
}


// A sliding window of 8 over blocks of 4: a sequence of 10 + 80 tokens runs in a
// pool of 6 blocks (24 positions), holding at most the window's blocks once it
// decodes, and produces what the windowed fake model gives alone.
TEST(SchedulerWindowTest, LongSequenceRunsInAPoolSmallerThanIt) {
  Driver d({.max_batch_tokens = 4}, {.n_blocks = 6, .block_size = 4, .window = 8}, kVocab);
  const SequenceParams p{.prompt = make_prompt(10, 3), .stop = {.max_tokens = 80}};
  ASSERT_TRUE(d.sched.add(1, p).ok());
  int64_t max_used = 0;
  for (int i = 0; i < 200 && d.sched.has_unfinished(); ++i) {
    ASSERT_FALSE(d.step().empty());
    const Sequence* s = d.sched.find(1);
    if (s && s->n_computed >= 10) max_used = std::max(max_used, d.sched.blocks().stats().n_used);
  }
  ASSERT_FALSE(d.sched.has_unfinished());
  EXPECT_LE(max_used, d.sched.blocks().window_blocks());
  EXPECT_EQ(generated_of(d.finished.at(1)), reference_generate(1, p.prompt, 80, {}, kVocab, 8));
  EXPECT_NE(reference_generate(1, p.prompt, 80, {}, kVocab, 8), reference_generate(1, p.prompt, 80, {}, kVocab))
      << "the window must matter for this check to mean anything";
  // Without a window it could never fit.
  Driver full({.max_batch_tokens = 4}, {.n_blocks = 6, .block_size = 4}, kVocab);
  EXPECT_EQ(full.sched.add(1, p).code(), StatusCode::kResourceExhausted);
  // A pool too small for the window and one chunk is refused up front.
  Driver tiny({.max_batch_tokens = 4}, {.n_blocks = 3, .block_size = 4, .window = 8}, kVocab);
  EXPECT_EQ(tiny.sched.add(1, p).code(), StatusCode::kResourceExhausted);
}

// Several windowed sequences sharing a prompt prefix in a tight pool, preempted
// by swap or by recompute, with and without prefix caching: every one produces
// what it would alone.
TEST(SchedulerWindowTest, SharedPrefixesAndPreemptionKeepOutputs) {
  for (bool swap : {false, true}) {
    for (bool caching : {false, true}) {
      Driver d({.max_batch_tokens = 8, .preemption_mode = swap ? PreemptionMode::kSwap : PreemptionMode::kRecompute},
               {.n_blocks = 10, .block_size = 4, .n_host_blocks = swap ? 12 : 0, .enable_prefix_caching = caching,
                .window = 6},
               kVocab);
      std::map<SeqId, SequenceParams> params;
      const std::vector<int32_t> prefix = make_prompt(13, 5);
      for (SeqId id = 1; id <= 4; ++id) {
        std::vector<int32_t> prompt = prefix;
        prompt.push_back(static_cast<int32_t>(id));
        params[id] = {.prompt = prompt, .stop = {.max_tokens = 30 + 5 * id}};
        ASSERT_TRUE(d.sched.add(id, params[id]).ok());
      }
      ASSERT_TRUE(d.run_to_completion(2000)) << "swap " << swap << " caching " << caching;
      EXPECT_EQ(d.n_invariant_failures, 0);
      for (const auto& [id, p] : params) {
        EXPECT_EQ(generated_of(d.finished.at(id)), reference_generate(id, p.prompt, p.stop.max_tokens, {}, kVocab, 6))
            << "seq " << id << " swap " << swap << " caching " << caching;
      }
      EXPECT_EQ(d.sched.blocks().stats().n_used, 0);
    }
  }
}

// What the next schedule() wants, read without changing anything (the fluid
// split's load), and admission bounded by the pool the split can reach.
TEST(Scheduler, BlockDemandIsWhatTheNextStepReservesAndAdmissionTakesItsBound) {
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 4}, {.n_blocks = 8, .n_blocks_limit = 4, .block_size = 4});
  // 6 prompt tokens + up to 5 generated: 3 blocks each at most.
  ASSERT_TRUE(s.add(1, {.prompt = make_prompt(6, 1), .stop = {.max_tokens = 5}}).ok());
  ASSERT_TRUE(s.add(2, {.prompt = make_prompt(6, 2), .stop = {.max_tokens = 5}}).ok());
  BlockDemand d = s.block_demand();
  EXPECT_EQ(d.running_need, 0);
  EXPECT_EQ(d.waiting_need, 2);  // the first waiting prompt's 6 tokens
  EXPECT_EQ(d.largest_seq, 3);
  const StepPlan plan = s.schedule();  // both prompts: 2 blocks each, the whole limit
  EXPECT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(s.blocks().pool().n_used(), 4);
  // 17 tokens need 5 blocks: more than the limit of 4, refused unless admission reaches further.
  EXPECT_FALSE(s.add(3, {.prompt = make_prompt(12, 3), .stop = {.max_tokens = 6}}).ok());
  s.set_admission_blocks(8);
  EXPECT_TRUE(s.add(3, {.prompt = make_prompt(12, 3), .stop = {.max_tokens = 6}}).ok());
  EXPECT_EQ(s.block_demand().largest_seq, 5);
}

}  // namespace
}  // namespace sluice
