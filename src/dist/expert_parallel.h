// Expert parallelism (--parallel ep): a mixture-of-experts model's routed
// experts spread over the processes of an MPI job, every other weight on
// rank 0.
//
// Rank 0 runs the whole model as one process would (attention, routers,
// shared experts, the output head, sampling, the server) and holds its own
// share of every routed layer's experts; rank r > 0 holds its share alone
// (plan/expert_parallel_plan.h: contiguous expert ids, the same in every
// layer). At each routed layer ExpertParallelDriver (the model's
// ExpertDispatch) sends each rank the rows routed to its experts and computes
// its own meanwhile:
//
//   rank 0: route -> [rows, ids] to each r with work (kTagControl)
//           own experts: expert_ffn over its (token, slot) rows
//           shared expert (if any)
//           <- r's expert outputs (kTagReturn), waited with the deadline
//           out[t] = sum over slots in order of weight x output, + shared
//   rank r: expert_ffn over the rows it got -> the outputs back
//
// Every expert computes the same rows in the same order as in one process
// (a (token, slot) row is one row of expert_ffn with weight 1, whose output
// is the expert's output exactly), and rank 0 sums them in slot order as the
// CPU backend does: greedy tokens, and on the CPU backend the logits, are
// bit-identical to one process.
//
// Messages (rank 0 -> r):  ExpertMsgHeader | ids [n_rows, padded to 4] | rows [n_rows, n_embd] f32
//          (r -> 0):       outputs [n_rows, n_embd] f32, in the order sent
// A message of kind kShutdown ends the worker.
//
// A failure (a worker that died or does not answer within the timeout, an
// MPI error) fails the step; later steps fail at once, and after a grace
// period the job is ended (Comm::abort), as the pipeline does. Buffers grow
// to the largest step and are kept. Called on the model's forward thread.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "dist/comm.h"
#include "model/expert_dispatch.h"
#include "model/model.h"
#include "plan/expert_parallel_plan.h"

namespace sluice::dist {

struct ExpertMsgHeader {
  int32_t kind = 0;  // 1: a layer's rows, 2: shutdown
  int32_t layer = 0;
  int64_t n_rows = 0;
};

class ExpertParallelDriver : public ExpertDispatch {
 public:
  // hp: rank 0's model's (outlives the driver). The plan's shares say which
  // rank computes which expert.
  ExpertParallelDriver(Comm& comm, const ModelHparams& hp, plan::ExpertParallelPlan plan, double abort_grace_s);
  ~ExpertParallelDriver() override;

  Status experts(const LayerStep& s, const MoeStep& m) override;

  // Tells every worker to stop (the job's clean end). Errors: a send failed.
  Status shutdown();
  bool failed() const { return failed_.load(); }
  const plan::ExpertParallelPlan& plan() const { return plan_; }
  // Bytes sent from rank src to rank dst (counted on rank 0), 0 for a pair
  // that exchanges nothing.
  uint64_t link_bytes(int src, int dst) const;
  // Routed layers dispatched, and (token, slot) rows computed by each rank.
  int64_t layers() const { return layers_; }
  int64_t rows(int r) const { return rows_[static_cast<size_t>(r)]; }

 private:
  Status dispatch(const LayerStep& s, const MoeStep& m);
  void fail(const Status& st);

  Comm& comm_;
  const ModelHparams& hp_;
  plan::ExpertParallelPlan plan_;
  double abort_grace_s_;
  std::vector<int32_t> owner_;               // [n_expert] the rank that computes it
  std::vector<int64_t> count_;               // [n_ranks] the layer's rows per rank
  std::vector<int64_t> slot_row_;            // [n_tok * n_used] the pair's row in its rank's outputs
  std::vector<std::vector<uint8_t>> msg_;    // [n_ranks] the message to each (r = 0: unused)
  std::vector<std::vector<float>> out_;      // [n_ranks][rows, n_embd] expert outputs (weight 1)
  std::vector<float> x0_;                    // [rows, n_embd] rank 0's rows
  std::vector<int32_t> ids0_;                // [rows] their experts
  std::vector<float> ones_;                  // [rows] 1.0f
  std::vector<float> sh_gate_, sh_up_, sh_y_;  // the shared expert's [n_tok, n_ff_shared] x2, [n_tok, n_embd]
  std::vector<Pending> sends_, recvs_;
  std::vector<Counter*> out_bytes_, back_bytes_;  // [n_ranks] 0 -> r, r -> 0 (null at 0)
  int64_t layers_ = 0;
  std::vector<int64_t> rows_;                // [n_ranks]
  std::atomic<bool> failed_{false};
  Status failure_;
  std::thread watchdog_;
};

// Ranks > 0 (of `comm`: pp,ep's stage group): computes the experts
// [mine.begin, mine.end) of every routed layer of `model` (loaded with
// experts_only; pp,ep: its stage's layers alone) for rank 0's messages, until
// its shutdown (OK) or a failure (its error).
Status run_expert_worker_loop(Comm& comm, Model& model, plan::ExpertRange mine);

}  // namespace sluice::dist
