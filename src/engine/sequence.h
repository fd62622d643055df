// Sequence: one request's tokens and its progress through the scheduler.
//
// The scheduler's single rule is stated in two numbers:
//
//   tokens:     [ prompt ............ | generated ...... ]
//                0                    n_prompt            n_total
//   n_computed: leading tokens whose K/V rows exist in the cache
//
// Each step gives a sequence tokens n_computed .. n_computed + k - 1 to compute;
// when the chunk reaches n_total the step samples a token, which is appended, so
// n_total grows by one and the sequence again has one token to compute (decode).
// A prefix-cache hit starts n_computed above 0; preemption by recompute resets it
// to 0 (the generated tokens stay and are recomputed like prompt tokens).
//
// Speculative decoding adds draft tokens after the committed ones; they are
// computed like any other token, and the verifier's result replaces them:
//
//   tokens:     [ prompt ...... | generated .. t | d1 d2 d3 ]   n_draft = 3
//                                  n_computed ---^             n_total = committed + 3
//   verified:   [ prompt ...... | generated .. t  d1 d2 x ]    d1, d2 accepted, x new
//   n_computed advances past t, d1, d2; d3's K/V row is garbage, overwritten later.
//
// State moves:
//
//   waiting --admit--> running --finish/abort--> finished
//      ^                |   ^
//      +--recompute-----+   +--swap in-- swapped <--swap out-- running
//
// Plain data, owned by the Scheduler; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_manager.h"
#include "sample/stop_condition.h"
#include "sluice/finish_reason.h"
#include "sluice/status.h"

namespace sluice {

enum class SeqState { kWaiting, kRunning, kSwapped, kFinished };

const char* seq_state_name(SeqState state);

// What a caller submits.
struct SequenceParams {
  std::vector<int32_t> prompt;  // token ids, at least one
  StopCondition stop;           // stop tokens and max_tokens (at least 1)
  int32_t priority = 0;         // higher is scheduled first; FCFS within one
  uint64_t loras = 0;           // the model's adapters it runs with (ForwardSeq::loras); 0: none
};

// Errors: empty prompt, stop.max_tokens < 1.
Status validate_sequence_params(const SequenceParams& params);

struct Sequence {
  SeqId id = 0;
  std::vector<int32_t> tokens;  // prompt then generated
  int64_t n_prompt = 0;
  int64_t n_computed = 0;       // leading tokens with K/V in the cache
  StopCondition stop;
  int32_t priority = 0;
  uint64_t arrival = 0;         // order of submission (forks get a new one)
  SeqState state = SeqState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;  // kStop, kLength or kAbort once finished
  int64_t n_preemptions = 0;
  int64_t n_draft = 0;          // trailing speculative tokens, not yet verified
  uint64_t loras = 0;           // adapters (SequenceParams::loras); also its prefix-cache key, since
                                // they change the K/V it computes

  static Sequence from_params(SeqId id, SequenceParams params, uint64_t arrival);

  int64_t n_total() const { return static_cast<int64_t>(tokens.size()); }
  // Prompt and generated tokens: all but the drafts.
  int64_t n_committed() const { return n_total() - n_draft; }
  int64_t n_generated() const { return n_committed() - n_prompt; }
  // Tokens still to compute before the next sample.
  int64_t n_uncomputed() const { return n_total() - n_computed; }
  std::span<const int32_t> prompt() const { return std::span<const int32_t>(tokens).first(n_prompt); }
  std::span<const int32_t> generated() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(n_prompt),
                                                     static_cast<size_t>(n_generated()));
  }
  std::span<const int32_t> committed() const {
    return std::span<const int32_t>(tokens).first(static_cast<size_t>(n_committed()));
  }
  std::span<const int32_t> draft() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(n_committed()));
  }
  // Removes the drafts (tokens back to the committed ones).
  void drop_draft() {
    tokens.resize(static_cast<size_t>(n_committed()));
    n_draft = 0;
  }
  bool is_finished() const { return state == SeqState::kFinished; }

  // Appends sampled tokens in order (no drafts may be pending), stopping where
  // the StopCondition says (after a stop token, or at max_tokens; the rest are
  // dropped). Returns why the sequence is now finished, or kNone. The caller
  // sets state.
  FinishReason append_generated(std::span<const int32_t> new_tokens);
};

// Queue order: higher priority first, then earlier arrival. The last sequence in
// this order is the first to be preempted.
bool schedules_before(const Sequence& a, const Sequence& b);

}  // namespace sluice
