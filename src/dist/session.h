// Session: this process's part in a job run across processes (--parallel).
//
// Every process of the job runs the same command line under an MPI launcher
// (mpirun). Rank 0 loads through load_pipelined() and goes on as the command
// would alone (its model's layers beyond its own range run on the other
// ranks); ranks > 0 call run_worker(), which returns when rank 0 ends the job.
//
// Start, on every rank together (job_start.h):
//
//   rank r -> 0   hello: fingerprint (binary, model file), memory, measured rates
//   0 <-> r       link probe (link_probe.h)
//   0             refuse a job whose fingerprints differ (naming the rank and
//                 what differs), else plan the cut (plan/pipeline_plan.h)
//   0 -> r        setup: every rank's layer range and rank 0's load options
//   every rank    load_model() of its own range; r -> 0: loaded, or why not
//
// With --parallel ep the plan is the experts' shares instead of layer ranges
// (load_expert_parallel(), expert_parallel.h); a share, like a range, may
// stream from its rank's disk under the rank's --mem-budget.
//
// With --parallel pp,ep --ep-size E both (plan/pipeline_expert_plan.h): the
// ranks are stages of E; start() splits the job into the stage leads' pipeline
// (stage_comm(): rank g of it is stage g's lead, job rank g x E) and each
// stage's group (group_comm(): rank 0 of it is the lead). Stage 0's lead is
// rank 0 (load_pipeline_experts()); every lead's model dispatches its routed
// layers' experts over its group (ExpertParallelDriver on group_comm()), a
// lead of a later stage running the pipeline's worker loop on stage_comm(),
// the other ranks the expert worker loop on group_comm(), for their stage's
// layers only. The start, the plan and the load go over the whole job as above.
//
// The placement map (which rank holds which layers, in which tier, the rates
// and links measured, the predicted step with its network leg; job_plan.h) is
// printed at load and kept in LoadedModel::placement_report. Thread-compatible: the
// command's thread starts and ends it; the model's forward thread runs steps.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/expert_parallel.h"
#include "dist/pipeline.h"
#include "runtime/load_model.h"

namespace sluice::dist {

struct ParallelOptions {
  std::string mode = "pp";     // pp: pipeline (layer ranges per rank); ep: experts per rank; pp,ep: both
  std::string ep_attention = "auto";  // ep: rank0, every or auto (plan::parse_ep_attention)
  int64_t ep_size = 0;         // pp,ep: ranks per pipeline stage (required; 0 otherwise)
  double timeout_s = 60;       // what a rank waits for another during a step
  double abort_grace_s = 3;    // after a failure, before the job is ended
  int64_t micro_batches = 0;   // pp, pp,ep: micro-batches per step (0: the plan's best; else at most
                               // this many, one per token at the least, up to kMaxMicroBatches)
};

// Errors: a mode other than pp, ep and pp,ep (or ep,pp); pp,ep without an
// ep_size >= 1; an ep_size with another mode. Session::start() and `plan
// parallel` check with it.
Status check_parallel_mode(const std::string& mode, int64_t ep_size);
// Errors: an --ep-attention other than auto, rank0 and every, or other than
// auto with a mode that is not ep. Session::start() and `plan parallel`.
Status check_ep_attention(const std::string& mode, const std::string& ep_attention);

class Session {
 public:
  // Joins the job (pp,ep: splits it into stages, collectively). Errors: an
  // unknown mode (check_parallel_mode()), no MPI in this build, pp,ep whose
  // job size is not a multiple of its ep_size (on every rank alike).
  static StatusOr<std::shared_ptr<Session>> start(const ParallelOptions& options);
  // Rank 0: tells the workers to stop, or ends the job with a non-zero exit
  // when a step failed.
  ~Session();

  Comm& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  bool is_worker() const { return comm_->rank() > 0; }
  const ParallelOptions& options() const { return options_; }
  bool pipeline_experts() const { return options_.mode == "pp,ep"; }
  // pp,ep: the stage leads' pipeline (null on the other ranks) and this
  // rank's stage group; otherwise null and the job's own.
  Comm* stage_comm() { return stage_comm_.get(); }
  Comm& group_comm() { return group_comm_ ? *group_comm_ : *comm_; }
  // Rank 0, after load_pipelined(): the stage runner its model uses.
  PipelineDriver* driver() { return driver_.get(); }
  // Rank 0 with --parallel ep, after load_pipelined(): the model's expert dispatch.
  ExpertParallelDriver* expert_driver() { return ep_driver_.get(); }

 private:
  friend StatusOr<LoadedModel> load_pipelined(const std::string&, const LoadOptions&, Session&);
  friend StatusOr<LoadedModel> load_expert_parallel(const std::string&, const LoadOptions&, Session&);
  friend StatusOr<LoadedModel> load_pipeline_experts(const std::string&, const LoadOptions&, Session&);
  Session() = default;
  void end_pipeline();
  void end_experts();
  ParallelOptions options_;
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Comm> stage_comm_, group_comm_;  // pp,ep (split from comm_, freed before it)
  std::unique_ptr<PipelineDriver> driver_;
  std::unique_ptr<ExpertParallelDriver> ep_driver_;
};

// Rank 0: the job's start (above), then rank 0's own range loaded with its
// stage runner set (with --parallel ep: load_expert_parallel()). Errors: a
// rank refused or failed (naming it and why), no cut fits the ranks' memory,
// a rank did not answer in time.
StatusOr<LoadedModel> load_pipelined(const std::string& path, const LoadOptions& options, Session& session);

// Rank 0 with --parallel ep: the same start, planned by
// plan_expert_parallel() (every routed layer's experts in contiguous shares;
// attention on rank 0 or on every rank, as --ep-attention asks or the
// planner chooses), then everything but the other ranks' experts loaded,
// with the model's expert dispatch set (expert_parallel.h; with attention on
// every rank also its stage runner). A rank whose share exceeds its
// --mem-budget streams it from its own disk (the setup says which). Errors:
// as load_pipelined(), and a model without routed experts, a backend whose
// buffers are not host memory, a share that cannot stream under its budget.
StatusOr<LoadedModel> load_expert_parallel(const std::string& path, const LoadOptions& options, Session& session);

// Rank 0 with --parallel pp,ep: the same start, planned by
// plan_pipeline_experts() (the cut over the stage leads, each stage's
// experts over its group), then rank 0's range with its share of the range's
// experts, with the stage runner (the leads' pipeline) and the expert
// dispatch (its group) set. Errors: as both, and a job size that is not
// stages x ep_size, more stages than layers, a share that does not fit its
// rank's memory (none streams within a stage).
StatusOr<LoadedModel> load_pipeline_experts(const std::string& path, const LoadOptions& options, Session& session);

// What a worker takes from its own command line (the rest comes from rank 0).
struct WorkerOptions {
  int n_threads = 0;
  uint64_t mem_budget_bytes = 0;  // weights it may hold (0: the memory available)
  double disk_rate_cap_bytes_per_s = 0;  // --disk-rate-cap on its streamed reads (0: none)
  std::string backend = "cpu";
};

// Ranks > 0: the job's start from the other side, then the worker loop
// (worker.h) until rank 0 ends the job. Errors: refused by rank 0 (the
// reason), its load failed, a failure during a step.
Status run_worker(const std::string& path, const WorkerOptions& options, Session& session);

}  // namespace sluice::dist
