// PipelineDriver: rank 0's side of a pipelined step (the model's StageRunner).
//
// Rank 0 holds the first layer range, the embeddings and the output head, and
// owns everything that is not a layer: the HTTP server, the scheduler, the KV
// block tables, sampling. Each step it sends the step's plan to every worker
// (protocol.h), cuts the step into micro-batches of about equal tokens (as
// many as the pipeline plan says make the step fastest: one in decode, more
// when the step is compute-bound; a long prompt is cut into pieces for it, so
// that one prompt pipelines too), runs its layers on each micro-batch and
// sends the hidden rows on; the last stage sends back the rows that ask for
// logits:
//
//   rank 0:  [mb0][mb1][mb2] ....................... <- rows   logits
//   rank 1:       [mb0][mb1][mb2]
//   rank 2:            [mb0][mb1][mb2] -> rows
//
// A failure (a worker that died or does not answer within the timeout, an MPI
// error) fails the step with an error naming the rank; every later step fails
// at once with the same error, and after a grace period (for the server to
// answer the requests in flight) the job is ended with a non-zero exit
// (Comm::abort). Counters: bytes sent per link (sluice_dist_bytes_sent_total)
// and micro-batches per step. Called on the model's forward thread only.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "dist/comm.h"
#include "dist/job_failure.h"
#include "model/stage_runner.h"
#include "plan/pipeline_plan.h"

namespace sluice::dist {

// Most micro-batches a step is cut into.
inline constexpr int64_t kMaxMicroBatches = 8;

class PipelineDriver : public StageRunner {
 public:
  // n_batch: the model's most tokens per step (sizes the return buffer);
  // micro_batches: 0, the plan's best per step, else that many (at most one
  // per token), in [0, kMaxMicroBatches].
  PipelineDriver(Comm& comm, plan::PipelinePlan plan, int64_t n_embd, int64_t n_batch, double abort_grace_s,
                 int64_t micro_batches = 0);
  ~PipelineDriver() override;

  // The step cut into the plan's best number of micro-batches by tokens, a
  // long prompt in pieces (cut_sequences, protocol.h).
  std::span<const ForwardSeq> pieces(const Model& model, std::span<const ForwardSeq> seqs) override;
  Status run_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) override;
  void copy_kv_blocks(std::span<const BlockCopy> copies) override;

  // Tells every worker to stop (the job's clean end). Errors: a send failed.
  Status shutdown();
  // Whether a step failed (the job is ending).
  bool failed() const { return failure_.failed(); }
  const plan::PipelinePlan& plan() const { return plan_; }
  // Bytes sent from rank src to rank dst (step plans, hidden rows, the rows
  // back), counted on rank 0 from the protocol's sizes: 0 for a pair that
  // exchanges nothing.
  uint64_t link_bytes(int src, int dst) const;
  int64_t steps() const { return steps_; }
  int64_t tokens() const { return tokens_; }

 private:
  Status step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv);

  Comm& comm_;
  plan::PipelinePlan plan_;
  int64_t n_embd_;
  int64_t micro_batches_fixed_ = 0;
  std::vector<uint8_t> msg_;          // the step's message (capacity kept)
  std::vector<int32_t> micro_ends_;   // [kMaxMicroBatches]
  std::vector<ForwardSeq> pieces_;    // [model's max_seqs] the step's sequences, cut
  std::vector<BlockCopy> copies_;     // queued for the next step's message
  std::vector<float> ret_;            // [n_batch, n_embd] rows back from the last stage
  std::vector<Pending> sends_, recvs_;
  Counter* link(int src, int dst) { return link_bytes_[static_cast<size_t>(src * plan_.n_stages() + dst)]; }
  std::vector<Counter*> link_bytes_;  // [n_stages * n_stages] src * n + dst; null: an unused pair
  Counter* micro_batches_ = nullptr;
  int64_t steps_ = 0, tokens_ = 0;
  JobFailure failure_;
};

}  // namespace sluice::dist
