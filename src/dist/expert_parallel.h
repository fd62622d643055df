// Expert parallelism (--parallel ep): a mixture-of-experts model's routed
// experts spread over the processes of an MPI job; the rest of the model
// (attention, routers, shared experts, the head) on rank 0 or on every rank
// (plan::EpAttention, chosen by plan/expert_parallel_plan.h).
//
// Rank r holds its share of every routed layer's experts (contiguous expert
// ids, the same in every layer). ExpertParallelDriver is the model's
// ExpertDispatch at each routed layer.
//
// Attention on rank 0 (kRank0): rank 0 runs the whole model as one process
// would (the server, sampling too); ranks r > 0 hold their share alone. At
// each routed layer rank 0 sends each rank the rows routed to its experts and
// computes its own meanwhile:
//
//   rank 0: route -> [rows, ids] to each r with work (kTagControl)
//           own experts: expert_ffn over its (token, slot) rows
//           shared expert (if any)
//           <- r's expert outputs (kTagReturn), waited with the deadline
//           out[t] = sum over slots in order of weight x output, + shared
//   rank r: expert_ffn over the rows it got -> the outputs back
//          (run_expert_worker_loop)
//
// Attention on every rank (kEvery): every rank holds the rest of the model
// and a KV pool of rank 0's shape. Rank 0's driver is also its model's
// StageRunner: each step it sends the step's description (protocol.h, as the
// pipeline's; copy-on-write copies included) to every rank and runs its
// layers; each rank runs the same layers on the same tokens
// (run_replica_worker_loop), so every rank routes alike, and at each routed
// layer:
//
//   every rank: own experts: expert_ffn over its (token, slot) rows
//               shared expert (if any)
//               its outputs -> every other rank, theirs <- (kTagReturn)
//               out[t] = sum over slots in order, + shared
//
// one exchange per layer instead of a round trip, and the hidden states stay
// identical on every rank (the same arithmetic in the same order). Rank 0
// alone computes the logits.
//
// Either way every expert computes the same rows in the same order as in one
// process (a (token, slot) row is one row of expert_ffn with weight 1, whose
// output is the expert's output exactly), and the outputs are summed in slot
// order as the CPU backend does: greedy tokens, and on the CPU backend the
// logits, are bit-identical to one process. (kEvery assumes the ranks compute
// alike: the same binary, checked at start, and the same kernels, which
// runtime dispatch picks per machine; ranks whose routing differed would
// disagree on the rows exchanged and fail the step.)
//
// Read-ahead (kRank0): a rank r > 0 that streams its share from its disk
// reads what it is sent unless told earlier. Rank 0 routes, so it predicts
// each routed layer's experts (ExpertFeed); the driver sends each streaming
// rank its share of them (kind 3) before the layer's rows, and the rank reads
// those ahead while rank 0 runs attention (Model::predict_experts).
//
// Messages (kRank0, rank 0 -> r):  ExpertMsgHeader | ids [n_rows, padded to 4] | rows [n_rows, n_embd] f32
//          (kRank0 predict, 0 -> r): ExpertMsgHeader (n_rows: ids) | ids [n_rows, padded to 4]
//          (r -> 0):               outputs [n_rows, n_embd] f32, in the order sent
//          (kEvery, r -> q):       outputs [n_rows of r, n_embd] f32, in pair order
// A message of kind kShutdown (kEvery: the step protocol's) ends the worker.
//
// A failure (a worker that died or does not answer within the timeout, an
// MPI error) fails the step; on rank 0 later steps fail at once, and after a
// grace period the job is ended (Comm::abort), as the pipeline does. Buffers
// grow to the largest step and are kept. Called on the model's forward thread.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "dist/comm.h"
#include "dist/job_failure.h"
#include "model/expert_dispatch.h"
#include "model/model.h"
#include "model/stage_runner.h"
#include "plan/expert_parallel_plan.h"

namespace sluice::dist {

struct ExpertMsgHeader {
  int32_t kind = 0;  // 1: a layer's rows, 2: shutdown, 3: a layer's predicted experts
  int32_t layer = 0;
  int64_t n_rows = 0;
};

class ExpertParallelDriver : public ExpertDispatch, public StageRunner {
 public:
  // hp: this rank's model's (outlives the driver). shares[r]: the experts
  // rank r computes. attention: kRank0 (only on rank 0) or kEvery (on every
  // rank; rank 0's is also its model's stage runner).
  ExpertParallelDriver(Comm& comm, const ModelHparams& hp, std::vector<plan::ExpertRange> shares,
                       plan::EpAttention attention, double abort_grace_s);
  ~ExpertParallelDriver() override;

  Status experts(const LayerStep& s, const MoeStep& m) override;
  // kRank0, rank 0: each read-ahead rank's share of `ids`, sent (kind 3).
  void predict(int64_t layer, std::span<const int32_t> ids) override;
  // kRank0, rank 0: the ranks that stream their share (read_ahead[r] != 0),
  // to which predictions go; none by default.
  void set_read_ahead(std::vector<char> read_ahead) { read_ahead_ = std::move(read_ahead); }
  // kEvery, rank 0: the step's description to every rank, then this model's
  // layers over the whole step.
  Status run_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv) override;
  void copy_kv_blocks(std::span<const BlockCopy> copies) override;

  // Rank 0: tells every worker to stop (the job's clean end). Errors: a send failed.
  Status shutdown();
  bool failed() const { return failure_.failed(); }
  int64_t n_ranks() const { return static_cast<int64_t>(shares_.size()); }
  plan::EpAttention attention() const { return attention_; }
  // Bytes sent from rank src to rank dst (counted on rank 0, the pairs with
  // rank 0), 0 for a pair that exchanges nothing.
  uint64_t link_bytes(int src, int dst) const;
  // Routed layers dispatched, and (token, slot) rows computed by each rank.
  int64_t layers() const { return layers_; }
  int64_t rows(int r) const { return rows_[static_cast<size_t>(r)]; }

 private:
  Status dispatch(const LayerStep& s, const MoeStep& m);
  Status broadcast_step(Model& model, std::span<const ForwardSeq> seqs, KvStore& kv);
  // Rank 0: kRank0's rows to each rank with work, their outputs' receives posted.
  Status send_rows(const LayerStep& s, const MoeStep& m);
  // kEvery: this rank's outputs to every other rank, theirs' receives posted.
  Status post_exchange();

  Comm& comm_;
  const ModelHparams& hp_;
  std::vector<plan::ExpertRange> shares_;
  plan::EpAttention attention_;
  int me_;                                   // this rank
  std::vector<int32_t> owner_;               // [n_expert] the rank that computes it
  std::vector<int64_t> count_;               // [n_ranks] the layer's rows per rank
  std::vector<int64_t> slot_row_;            // [n_tok * n_used] the pair's row in its rank's outputs
  std::vector<std::vector<uint8_t>> msg_;    // [n_ranks] kRank0: the message to each (r = 0: unused)
  std::vector<std::vector<float>> out_;      // [n_ranks][rows, n_embd] expert outputs (weight 1)
  std::vector<float> xme_;                   // [rows, n_embd] this rank's rows
  std::vector<int32_t> ids_me_;              // [rows] their experts
  std::vector<float> ones_;                  // [rows] 1.0f
  std::vector<float> sh_gate_, sh_up_, sh_y_;  // the shared expert's [n_tok, n_ff_shared] x2, [n_tok, n_embd]
  std::vector<Pending> sends_, recvs_;
  std::vector<uint8_t> step_msg_;            // kEvery: the step's description (capacity kept)
  std::vector<int32_t> micro_ends_;          // [1] the whole step, one batch
  std::vector<BlockCopy> copies_;            // queued for the next step's description
  std::vector<Pending> step_sends_;
  std::vector<char> read_ahead_;             // [n_ranks] kRank0: predictions go to these ranks
  std::vector<std::vector<int32_t>> pred_msg_;  // [n_ranks] kRank0: a prediction (header, ids), as int32 words
  std::vector<uint8_t> pred_seen_;           // [n_expert]
  std::vector<Counter*> out_bytes_, back_bytes_;  // [n_ranks] 0 -> r, r -> 0 (null at 0, and off rank 0)
  int64_t layers_ = 0;
  std::vector<int64_t> rows_;                // [n_ranks]
  JobFailure failure_;
};

// Ranks > 0 under kRank0 (of `comm`: pp,ep's stage group): computes the experts
// [mine.begin, mine.end) of every routed layer of `model` (loaded with
// experts_only; pp,ep: its stage's layers alone) for rank 0's messages, until
// its shutdown (OK) or a failure (its error).
Status run_expert_worker_loop(Comm& comm, Model& model, plan::ExpertRange mine);

// Ranks > 0 under kEvery: runs every step rank 0 describes on `model` (the
// rest of the model and this rank's share, its expert dispatch a kEvery
// driver) against a KV pool mirroring rank 0's, without logits, until
// rank 0's shutdown (OK) or a failure (its error).
Status run_replica_worker_loop(Comm& comm, Model& model);

}  // namespace sluice::dist
