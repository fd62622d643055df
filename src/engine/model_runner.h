// ModelRunner: runs one engine step. StepPlan in, StepOutput out.
//
//   run(plan, sampling):
//     1. the plan's KV moves on the backend (swap out, swap in, copies; in
//        that order, step_plan.h says why)
//     2. one batched forward pass over every scheduled sequence
//     3. for every sequence that samples: a plain draw with its sampler (the
//        draws of a step run in parallel over the backend's host threads), or,
//        with drafts, exact verification (spec/verifier.h): accepted drafts
//        plus one token of the target's own
//
// The engine keeps scheduling, requests and text: it says per scheduled
// sequence which sampler draws for it (SeqSampling), and reads the tokens, the
// logits rows they were drawn from and the drafts' verdicts from StepOutput.
// Buffers are planned at construction; run() allocates only the output's token
// vectors. Not thread-safe: the engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/step_plan.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "sample/sampler.h"

namespace sluice {

// How one scheduled sequence samples this step.
struct SeqSampling {
  Sampler* sampler = nullptr;          // null: the sequence has no owner any more; nothing is drawn
  const float* draft_probs = nullptr;  // [n_draft, n_vocab] the distributions its drafts were drawn
                                       // from; null: deterministic drafts
};

struct RunnerConfig {
  int64_t max_seqs = 64;    // sequences per step
  int64_t max_logits = 64;  // logits rows per step: sampling sequences plus drafts verified
};

class ModelRunner {
 public:
  // `host_kv` is the swap target (null without swapping). The model, the
  // stores and the samplers the engine passes must outlive the runner.
  ModelRunner(Model& model, KvStore& kv, KvStore* host_kv, const RunnerConfig& config);

  // Runs `plan`. sampling: [plan.seqs.size()]. Fills out->seqs with one
  // SeqOutput per sequence that sampled and has a sampler; the logits rows
  // they point to stay valid until the next run(). Errors: the forward pass
  // failed (the caller fails the step's requests; KV moves have happened).
  Status run(const StepPlan& plan, std::span<const SeqSampling> sampling, StepOutput* out);
  // Seconds the last run()'s forward pass took.
  double last_forward_s() const { return last_forward_s_; }

 private:
  Model& model_;
  KvStore& kv_;
  KvStore* host_kv_;
  int64_t n_vocab_;
  std::unique_ptr<Buffer> logits_;     // [max_logits, n_vocab] floats, from Backend::alloc_host
  std::vector<float> verify_scratch_;  // [n_vocab]
  std::vector<ForwardSeq> fseqs_;
  struct Draw {
    Sampler* sampler;
    const float* logits;
    int32_t token;
  };
  std::vector<Draw> draws_;
  double last_forward_s_ = 0;
};

}  // namespace sluice
