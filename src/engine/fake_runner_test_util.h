// Test helpers for the scheduler: a fake model over a simulated paged KV cache.
//
// Each KV "row" of the simulation is a cell {token, pos}. The fake runner executes
// a StepPlan exactly as a real runner must (swap out, swap in, copies, forward):
// the forward writes the cell of every computed position through the block table,
// and to sample it reads the cells of positions 0 .. end - 1 back through the
// block table (its "attention") and returns next_token(seq, those tokens). So a
// wrong table, a missed copy-on-write, a lost swap or a stale prefix hit changes
// the tokens produced, and the outputs stop matching an unbatched reference run.
// Not thread-safe (test-only).
#pragma once

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "engine/scheduler.h"

namespace sluice::testing {

// The fake model: next token = f(sequence id, all tokens so far), in [0, vocab).
inline int32_t fake_next_token(SeqId id, std::span<const int32_t> tokens, int32_t vocab) {
  return static_cast<int32_t>(XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), static_cast<uint64_t>(id)) %
                              static_cast<uint64_t>(vocab));
}

// A draft of k tokens for a decoding sequence: the fake model's own continuation
// of `committed`, each token wrong (replaced) with probability wrong_percent / 100.
template <typename Rand>
std::vector<int32_t> fake_draft(SeqId id, std::span<const int32_t> committed, int k, int wrong_percent,
                                int32_t vocab, Rand& r) {
  std::vector<int32_t> tokens(committed.begin(), committed.end());
  std::vector<int32_t> draft;
  for (int i = 0; i < k; ++i) {
    int32_t t = fake_next_token(id, tokens, vocab);
    if (r.chance(wrong_percent)) t = (t + 1) % vocab;
    draft.push_back(t);
    tokens.push_back(t);
  }
  return draft;
}

// The fake model with a sliding window (window > 0): the next token depends on
// the last `window` tokens only, as a windowed model's last query reads them.
inline int32_t fake_next_token_windowed(SeqId id, std::span<const int32_t> tokens, int64_t window, int32_t vocab) {
  if (window > 0 && static_cast<int64_t>(tokens.size()) > window) tokens = tokens.last(static_cast<size_t>(window));
  return fake_next_token(id, tokens, vocab);
}

// What generation gives for one sequence alone: the reference outputs.
inline std::vector<int32_t> reference_generate(SeqId id, std::vector<int32_t> tokens, int64_t max_tokens,
                                               const std::vector<int32_t>& stop_tokens, int32_t vocab,
                                               int64_t window = 0) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    const int32_t t = fake_next_token_windowed(id, tokens, window, vocab);
    out.push_back(t);
    tokens.push_back(t);
    bool stop = false;
    for (const int32_t s : stop_tokens) stop |= s == t;
    if (stop) break;
  }
  return out;
}

struct Cell {
  int32_t token = -1;
  int64_t pos = -1;
};

class FakeRunner {
 public:
  FakeRunner(int64_t n_blocks, int64_t n_host_blocks, int64_t block_size, int32_t vocab)
      : block_size_(block_size),
        vocab_(vocab),
        device_(static_cast<size_t>(n_blocks * block_size)),
        host_(static_cast<size_t>(n_host_blocks * block_size)) {}

  // Executes `plan`; `blocks` is the scheduler's manager right after schedule(),
  // used to check that no write lands in a shared or registered block.
  StepOutput run(const StepPlan& plan, const BlockManager& blocks) {
    EXPECT_TRUE(plan.swap_out.empty() || plan.swap_in.empty()) << "swaps in both directions in one step";
    for (const BlockSwap& m : plan.swap_out) copy_block(device_, m.device_block, &host_, m.host_slot);
    for (const BlockSwap& m : plan.swap_in) copy_block(host_, m.host_slot, &device_, m.device_block);
    for (const BlockCopy& c : plan.copies) copy_block(device_, c.src, &device_, c.dst);
    StepOutput out;
    std::set<std::pair<int32_t, int64_t>> written;
    for (const ScheduledSeq& s : plan.seqs) {
      const int64_t end = s.pos0 + static_cast<int64_t>(s.tokens.size());
      EXPECT_LE(end, static_cast<int64_t>(s.block_table.size()) * block_size_) << "seq " << s.id;
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        const int64_t pos = s.pos0 + static_cast<int64_t>(i);
        const int32_t block = s.block_table[static_cast<size_t>(pos / block_size_)];
        EXPECT_TRUE(written.insert({block, pos % block_size_}).second)
            << "two writes to block " << block << " slot " << pos % block_size_;
        EXPECT_EQ(blocks.pool().ref_count(block), 1) << "seq " << s.id << " writes shared block " << block;
        EXPECT_FALSE(blocks.pool().has_hash(block)) << "seq " << s.id << " writes registered block " << block;
        device_[static_cast<size_t>(block * block_size_ + pos % block_size_)] = Cell{s.tokens[i], pos};
      }
      if (!s.sample) continue;
      // With a window, positions before the first query's window are not read
      // (their blocks may be released).
      const int64_t window = blocks.window();
      const int64_t lo = window > 0 ? std::max<int64_t>(0, s.pos0 - window + 1) : 0;
      std::vector<int32_t> seen;  // tokens of positions lo .. end - 1
      seen.reserve(static_cast<size_t>(end - lo));
      for (int64_t pos = lo; pos < end; ++pos) {
        const int32_t block = s.block_table[static_cast<size_t>(pos / block_size_)];
        const Cell& c = device_[static_cast<size_t>(block * block_size_ + pos % block_size_)];
        EXPECT_EQ(c.pos, pos) << "seq " << s.id << " reads a row of another position in block " << block;
        seen.push_back(c.token);
      }
      // Greedy verification of drafts: the model's token after each prefix, up to
      // the first one that differs from the draft (or one past the last draft).
      const size_t n_before = seen.size() - static_cast<size_t>(s.n_draft);
      const std::span<const int32_t> draft = std::span<const int32_t>(s.tokens).last(static_cast<size_t>(s.n_draft));
      SeqOutput o{.id = s.id};
      for (size_t i = 0;; ++i) {
        // Without a window lo is 0 and the prefix is whole; with one, the prefix
        // from lo holds at least the window of its last query.
        o.tokens.push_back(
            fake_next_token_windowed(s.id, std::span<const int32_t>(seen).first(n_before + i), window, vocab_));
        if (i == draft.size() || o.tokens.back() != draft[i]) break;
      }
      n_drafted += s.n_draft;
      n_accepted += static_cast<int64_t>(o.tokens.size()) - 1;
      out.seqs.push_back(std::move(o));
    }
    return out;
  }

  int64_t n_drafted = 0;   // draft tokens verified
  int64_t n_accepted = 0;  // of them, accepted

 private:
  void copy_block(const std::vector<Cell>& from, int32_t src, std::vector<Cell>* to, int32_t dst) {
    for (int64_t i = 0; i < block_size_; ++i) {
      (*to)[static_cast<size_t>(dst * block_size_ + i)] = from[static_cast<size_t>(src * block_size_ + i)];
    }
  }

  int64_t block_size_;
  int32_t vocab_;
  std::vector<Cell> device_;  // [n_blocks * block_size]
  std::vector<Cell> host_;    // [n_host_blocks * block_size]
};

// Checks a plan against the scheduler's limits.
inline void expect_plan_within_limits(const StepPlan& plan, const SchedulerConfig& config) {
  int64_t n = 0;
  std::set<SeqId> ids;
  for (const ScheduledSeq& s : plan.seqs) {
    EXPECT_FALSE(s.tokens.empty());
    EXPECT_TRUE(ids.insert(s.id).second) << "seq " << s.id << " twice in one step";
    if (config.long_prefill_token_threshold > 0) {
      EXPECT_LE(static_cast<int64_t>(s.tokens.size()), config.long_prefill_token_threshold);
    }
    n += static_cast<int64_t>(s.tokens.size());
  }
  EXPECT_EQ(n, plan.n_batch_tokens);
  EXPECT_LE(n, config.max_batch_tokens);
  EXPECT_LE(static_cast<int64_t>(plan.seqs.size()), config.max_seqs);
}

// Drives a Scheduler with a FakeRunner, checking the scheduler's invariants and
// limits after every schedule() and every update().
class Driver {
 public:
  Driver(const SchedulerConfig& config, const BlockManagerConfig& blocks, int32_t vocab)
      : sched(config, blocks), runner(blocks.n_blocks, blocks.n_host_blocks, blocks.block_size, vocab) {}

  // One step: schedule, run, update. Returns the plan it ran.
  StepPlan step() {
    StepPlan plan = sched.schedule();
    check("after schedule");
    expect_plan_within_limits(plan, sched.config());
    StepOutput out = runner.run(plan, sched.blocks());
    const Status st = sched.update(out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    check("after update");
    collect();
    return plan;
  }

  // Steps until nothing is left; false if that takes more than max_steps or a
  // step plans nothing while sequences are unfinished.
  bool run_to_completion(int max_steps) {
    for (int i = 0; i < max_steps && sched.has_unfinished(); ++i) {
      if (step().empty()) return false;
    }
    return !sched.has_unfinished();
  }

  void collect() {
    for (Sequence& s : sched.take_finished()) finished.emplace(s.id, std::move(s));
  }

  void check(const char* when) {
    const Status st = sched.check_invariants();
    EXPECT_TRUE(st.ok()) << when << ": " << st.to_string();
    if (!st.ok()) ++n_invariant_failures;
  }

  Scheduler sched;
  FakeRunner runner;
  std::map<SeqId, Sequence> finished;
  int n_invariant_failures = 0;
};

}  // namespace sluice::testing
