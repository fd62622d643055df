// Proposer: drafts tokens for speculative decoding.
//
// Each engine step, before scheduling, the engine asks the proposer for drafts
// for every sequence that decodes next (all committed tokens computed but the
// last). The target model then computes the last token and the drafts in one
// pass and the verifier keeps an accepted prefix (see verifier.h):
//
//   committed  [ t0 t1 ... tL-1 ]      tL-1 not yet in the target's cache
//   draft                       [ d1 d2 .. dk ]   proposed from the committed tokens
//
// A proposer may keep per-sequence state (a draft model's KV cache); the engine
// calls release() when a sequence finishes. Drafts are either deterministic (a
// proposer that picks tokens; the verifier treats each as a one-hot draw) or drawn
// with the task's sampler, and then each draft's distribution is returned too.
//
// Implementations: PromptLookup (n-gram match in the sequence itself) and
// DraftModel (a smaller model with the same vocabulary). Self-drafting variants
// (extra heads on the target) join by implementing this interface.
// Not thread-safe: called from the engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/block_manager.h"
#include "sample/sampler.h"
#include "sluice/status.h"

namespace sluice::spec {

struct DraftTask {
  SeqId seq = 0;
  std::span<const int32_t> tokens;  // the committed tokens (prompt + generated), at least one
  int32_t max_draft = 0;            // draft at most this many tokens (>= 1)
  // Draws the drafts when set (sampled requests; no penalties: the draft
  // distribution need not equal the target's, only be the one drawn from).
  // Null: deterministic drafts (e.g. the draft model's argmax).
  Sampler* sampler = nullptr;
  // Out: 0 .. max_draft tokens.
  std::vector<int32_t>* draft = nullptr;
  // Out, when sampler is set and the proposer draws (draws_from_sampler()):
  // row i = the distribution draft[i] was drawn from. [max_draft, n_vocab].
  float* probs = nullptr;
};

// What the last propose() call cost, so the engine can price a draft token.
// A round is a catch-up pass (tokens a sequence's drafter has not seen yet: in
// steady drafting just the tokens accepted last round) then n_steps passes of one
// token per sequence.
struct ProposeCost {
  double catch_up_s = 0;
  int64_t catch_up_tokens = 0;  // most tokens any one sequence caught up
  double steps_s = 0;
  int32_t n_steps = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // One line for logs and summaries, e.g. "prompt lookup (n-gram 1..3)".
  virtual std::string describe() const = 0;
  // Whether drafts of tasks with a sampler are drawn from it (and probs filled);
  // false: drafts are always deterministic.
  virtual bool draws_from_sampler() const = 0;
  // Fills each task's draft (possibly empty). Errors: a failed forward pass.
  virtual Status propose(std::span<DraftTask> tasks) = 0;
  // The sequence finished: drop whatever is kept for it.
  virtual void release(SeqId /*seq*/) {}
  // The cost of the last propose() (zeros for proposers without passes).
  virtual ProposeCost last_cost() const { return {}; }
};

}  // namespace sluice::spec
