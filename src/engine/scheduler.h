// Scheduler: decides, step by step, which tokens of which sequences to compute.
//
// It owns the queues (waiting, running, swapped) and the BlockManager that holds
// the sequences' KV blocks; it moves no bytes itself. One rule drives it: every
// sequence has n_computed and n_total tokens, and each step hands out tokens so
// that computed catches up with total, under max_batch_tokens and max_seqs.
//
//   schedule():
//     1. running, in queue order: reserve slots up to n_total (copy-on-write if
//        needed), then a chunk of min(n_total - n_computed, budget left,
//        long_prefill_token_threshold) tokens: 1 for a decode, a prefill chunk
//        otherwise. Out of blocks: preempt the last running sequence in queue
//        order (lowest priority, newest), by swap if configured and the host pool
//        has room, else by recompute; the sequence being served preempts itself
//        only when no other one is left to preempt.
//     2. if nothing was preempted: swapped sequences in queue order come back
//        while their blocks fit.
//     3. if nothing was preempted and none is swapped: waiting sequences in queue
//        order are admitted while their blocks fit (strict order: the first that
//        does not fit stops admission). A prefix-cache hit starts n_computed at
//        the cached length.
//   update(output): advances n_computed by what was scheduled, appends sampled
//     tokens, registers newly full blocks for prefix reuse, retires finished ones.
//     For a sequence with drafts: n_computed advances only past the accepted
//     ones, the drafts are replaced by the output, and the slots of rejected
//     drafts are released (block table truncated).
//   set_draft(id, draft): between steps, gives a decoding sequence draft tokens;
//     its next chunk computes them with its last token, all in one step (drafts
//     are trimmed to the step budget, dropped when their slots would need a
//     preemption or when the sequence is preempted).
//
// With a sliding window (BlockManagerConfig::window), update()'s mark_computed
// releases the blocks a sequence's next queries can no longer read, slots are
// reserved only through the chunk being scheduled, so a long generation (or
// prompt) holds a flat number of blocks, and add() accepts sequences longer
// than the pool (the window's blocks and a chunk's must fit it).
//
// Queue order everywhere: higher priority first, then earlier arrival.
// A sequence that fits the pool alone is always admitted eventually (add()
// refuses the others), so a non-empty scheduler always yields a non-empty plan.
//
// Not thread-safe: owned by the engine thread; calls alternate schedule() and
// update(); add/abort/fork may come between them (abort also inside a step).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "kv/block_manager.h"
#include "sluice/status.h"

namespace sluice {

enum class PreemptionMode { kRecompute, kSwap };

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;            // tokens computed per step, all sequences
  int64_t max_seqs = 256;                    // running sequences at most
  int64_t long_prefill_token_threshold = 0;  // tokens per sequence per step; 0: no cap
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;  // kSwap falls back to recompute
  int64_t watermark_blocks = 0;  // admission keeps this many blocks free while others run
};

// Errors: a non-positive budget or limit, a negative threshold or watermark, a
// block manager config without blocks.
Status validate_scheduler_config(const SchedulerConfig& config, const BlockManagerConfig& blocks);

struct SchedulerStats {
  int64_t n_steps = 0;
  int64_t n_scheduled_tokens = 0;
  int64_t n_preempted_recompute = 0;
  int64_t n_preempted_swap = 0;
  int64_t n_swapped_in = 0;
  int64_t n_finished = 0;  // aborted ones included
  int64_t n_aborted = 0;
};

// The blocks the next schedule() would want beyond those held (the fluid
// split's load, engine/fluid_control.h), read without changing anything.
struct BlockDemand {
  int64_t running_need = 0;  // fresh blocks the running sequences' next chunks reserve
  int64_t waiting_need = 0;  // blocks the first swapped (else waiting) sequence needs to come in (0: none)
  int64_t largest_seq = 0;   // the most blocks any unfinished sequence can come to hold (add()'s bound)
};

class Scheduler {
 public:
  // The configs must pass validate_scheduler_config.
  Scheduler(const SchedulerConfig& config, const BlockManagerConfig& blocks);

  // Queues a new sequence. Errors: bad params, id in use, or a sequence that
  // could not fit in the whole pool even alone.
  Status add(SeqId id, SequenceParams params);
  // Plans the next step. A step must not be in flight.
  StepPlan schedule();
  // Applies the outputs of the step in flight: exactly one output, with at least
  // one token, per scheduled sequence with sample = true (aborted ones may be
  // missing). Errors leave the state unchanged.
  Status update(const StepOutput& output);
  // Sets the draft tokens of a running sequence whose committed tokens are all
  // computed but the last (it decodes next step), replacing drafts not yet
  // scheduled. Drafts beyond max_tokens - n_generated - 1 are dropped (the output
  // appends at most n_draft + 1 tokens). Returns the drafts kept. Errors: no
  // such running sequence, one in prefill, a step in flight.
  StatusOr<int64_t> set_draft(SeqId id, std::span<const int32_t> draft);
  // Finishes a sequence with kAbort and frees its blocks; inside a step, at update.
  Status abort(SeqId id);
  // Starts `child` as a copy of `parent` (same tokens, sharing its blocks; the
  // first write into the shared partial block copies it). Allowed between steps
  // for a waiting parent or a running one whose reserved tokens are all computed.
  // With child_last_token, the child's last generated token (not yet computed)
  // is replaced: parallel samples share the prompt's blocks but draw their own
  // first token from the same logits.
  Status fork(SeqId parent, SeqId child, std::optional<int32_t> child_last_token = std::nullopt);

  // What the next schedule() wants, in blocks; a step must not be in flight.
  // An upper bound where prefix hits may lower it (a waiting prompt counts
  // all its blocks).
  BlockDemand block_demand() const;

  // The unfinished sequence `id`, or nullptr.
  const Sequence* find(SeqId id) const;
  // Finished sequences since the last call, in finishing order.
  std::vector<Sequence> take_finished();

  int64_t n_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t n_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t n_swapped() const { return static_cast<int64_t>(swapped_.size()); }
  bool has_unfinished() const { return !seqs_.empty(); }
  bool step_in_flight() const { return !in_flight_.empty(); }
  const std::vector<SeqId>& running() const { return running_; }
  const std::vector<SeqId>& waiting() const { return waiting_; }
  const std::vector<SeqId>& swapped() const { return swapped_; }

  const SchedulerConfig& config() const { return config_; }
  const BlockManager& blocks() const { return blocks_; }
  // The device pool's limit (BlockManager::set_block_limit; the fluid split).
  void set_block_limit(int64_t n_blocks) { blocks_.set_block_limit(n_blocks); }
  // add() admits sequences that fit this many blocks alone (0: the pool's
  // limit at the time): the pool the fluid split can grow to, which its
  // caller grows when such a sequence would otherwise wait forever.
  void set_admission_blocks(int64_t n_blocks) { admission_blocks_ = n_blocks; }
  SchedulerStats stats() const { return stats_; }

  // Every sequence in exactly one queue matching its state, queues sorted, block
  // tables exactly for running and swapped sequences and holding their tokens,
  // counters within bounds, and the BlockManager's own invariants.
  Status check_invariants() const;

 private:
  struct InFlight {
    SeqId id;
    int64_t n_tokens;
    bool sample;
    int64_t n_draft;
  };

  Sequence& seq(SeqId id);
  void insert_sorted(std::vector<SeqId>* queue, SeqId id);
  static void erase_from(std::vector<SeqId>* queue, SeqId id);
  // Tokens of s's next chunk under `budget` (all its drafts once fit_draft ran).
  int64_t chunk_size(const Sequence& s, int64_t budget) const;
  // The most tokens one chunk can have (max_batch_tokens, long_prefill_token_threshold).
  int64_t longest_chunk() const;
  // Slots s holds before its next chunk: all its tokens, or with a sliding
  // window only through that chunk (the rest come chunk by chunk, so a sequence
  // longer than the pool runs in its window's blocks).
  int64_t reserve_end(const Sequence& s, int64_t budget) const;
  // Reserves slots for tokens n_reserved .. end of a resident sequence.
  void reserve_slots(Sequence& s, int64_t end, StepPlan* plan);
  // Trims s's drafts so that its decode chunk fits `budget` tokens.
  void fit_draft(Sequence& s, int64_t budget);
  // Adds s's next chunk to the plan and takes it from the budget.
  void schedule_chunk(const Sequence& s, int64_t* budget, StepPlan* plan);
  // Moves a running sequence (already out of running_) to swapped or waiting.
  void preempt(SeqId id, StepPlan* plan);
  // Retires a sequence from whatever queue holds it.
  void finish(SeqId id, FinishReason reason);

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unordered_map<SeqId, Sequence> seqs_;  // unfinished sequences
  std::vector<SeqId> waiting_;                // queue order
  std::vector<SeqId> running_;                // queue order
  std::vector<SeqId> swapped_;                // queue order
  std::vector<Sequence> finished_;
  std::vector<InFlight> in_flight_;           // the step planned and not yet updated
  std::vector<SeqId> pending_aborts_;         // aborted while in flight
  uint64_t next_arrival_ = 0;
  int64_t admission_blocks_ = 0;  // set_admission_blocks (0: the pool's limit)
  SchedulerStats stats_;
};

}  // namespace sluice
