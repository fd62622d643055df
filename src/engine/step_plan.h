// StepPlan and StepOutput: the plain data passed between the scheduler and
// whoever runs a step (model runner, or a fake in tests).
//
//   Scheduler::schedule() -> StepPlan -> runner -> StepOutput -> Scheduler::update()
//
// The runner executes a plan in this order, because a block released by one
// part may be handed out again by a later part of the same plan:
//   1. swap_out: for each move, copy device block -> host slot
//   2. swap_in:  for each move, copy host slot -> device block
//   3. copies:   for each copy in list order, copy device block src -> dst
//   4. forward:  for each ScheduledSeq, compute K/V of its tokens at positions
//                pos0 .. pos0 + n - 1 (rows written through its block table),
//                attending to positions 0 .. pos0 + n - 1; if `sample`, produce
//                the next token from the last position's logits. With n_draft > 0
//                the last n_draft tokens are drafts: produce logits for the last
//                n_draft + 1 positions and verify (SeqOutput: accepted drafts, then
//                one token of the target's own).
// A plan never holds both swap_out and swap_in moves.
//
// Index math for one scheduled sequence (block_size = 4):
//
//   sequence tokens  t0 t1 t2 t3 | t4 t5 t6 t7 | t8 t9
//   n_computed = 5 ------------------^
//   this step:  tokens = {t5 .. t9}, pos0 = 5, sample = true (reaches n_total = 10)
//   row of position p: block_table[p / 4], slot p % 4
//
// Plain values, no pointers into the scheduler: safe to hand to another thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_manager.h"

namespace sluice {

struct ScheduledSeq {
  SeqId id = 0;
  std::vector<int32_t> tokens;       // the tokens to compute this step, in order
  int64_t pos0 = 0;                  // position of tokens[0] (= n_computed before the step)
  std::vector<int32_t> block_table;  // snapshot: every block of the sequence, position order
  bool sample = false;               // this chunk reaches n_total: produce a next token
  int64_t n_draft = 0;               // trailing draft tokens to verify (sample is then true)
  uint64_t loras = 0;                // the sequence's adapters (ForwardSeq::loras)
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  std::vector<BlockSwap> swap_out;  // device block -> host slot
  std::vector<BlockSwap> swap_in;   // host slot -> device block
  std::vector<BlockCopy> copies;    // copy-on-write, device -> device
  int64_t n_batch_tokens = 0;       // sum of tokens over seqs
  // Sequences moved out of the running set while scheduling this step.
  std::vector<SeqId> preempted;

  bool empty() const { return seqs.empty(); }
};

// What a step produced for one sequence that was scheduled with sample = true.
// One token; with drafts, the accepted drafts (a prefix of them) then one more.
struct SeqOutput {
  SeqId id = 0;
  std::vector<int32_t> tokens;
  // Row i: the logits tokens[i] was drawn from, [tokens.size(), n_vocab]
  // (owned by the runner, valid until its next step; null from fake runners).
  const float* logits = nullptr;
  int32_t n_drafted = 0;   // drafts verified this step
  int32_t n_accepted = 0;  // of them, accepted
};

struct StepOutput {
  std::vector<SeqOutput> seqs;
};

}  // namespace sluice
