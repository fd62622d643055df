// The start of a job run across processes (session.h), both sides of it:
// every rank's hello (fingerprint, memory, measured rates), rank 0 gathering
// them with the link probe, the setup message of load options, and the load
// results that decide whether the job starts (protocol.h lists the tags).
// The plans and the loads themselves are session.cpp's.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/comm.h"
#include "dist/session.h"
#include "format/model_file.h"
#include "model/hparams.h"
#include "plan/calibrate.h"
#include "plan/pipeline_plan.h"
#include "runtime/load_model.h"
#include "sluice/status.h"

namespace sluice::dist {

using nlohmann::json;

// Loading a rank's range may read tens of GB from its disk: that wait gets
// this many times the step timeout.
constexpr double kLoadTimeoutFactor = 20;

// This rank's fingerprint, memory and rates (the planner's probes on the
// model's own layer, briefly; under its own --mem-budget also the model
// file's read rate as the weight store reads it, for a range that streams),
// as the hello message; *cal: the rates as measured, for streaming the rank's
// range. The message's disk rate is at most --disk-rate-cap, as the rank's
// capped reads will find it. The ranks measure one at a time.
StatusOr<json> hello(Comm& c, const std::string& path, const ModelFile& file, int n_threads, uint64_t mem_budget,
                     double disk_rate_cap, plan::Calibration* cal_out);

Status send_json(Comm& c, int dest, int tag, const json& j, const char* what);
// Errors: the receive's (timeout, MPI), a message that is not a JSON object.
StatusOr<json> recv_json(Comm& c, int src, int tag, const char* what, double timeout);
Status send_to_workers(Comm& c, int tag, const json& j, const char* what);

// What rank 0 learns at the job's start, before any plan: the model, every
// rank's resources and its link to rank 0, and whether the ranks may run together.
struct JobStart {
  ModelFile file;
  ModelHparams hp;
  std::vector<plan::RankResources> ranks;  // [n_ranks]
  std::vector<plan::LinkFigures> links;    // [n_ranks] links[r]: rank 0 <-> rank r (links[0] unused)
  plan::Calibration cal;                   // rank 0's rates (its range's streaming plans with them)
  Status refusal;  // ok, or the job's processes differ (naming each rank and what differs)
};

// Rank 0: the start every plan shares: every rank's hello with the
// fingerprints compared, then the link probe. A refusal is kept, not
// returned: the workers wait for the setup message either way (refuse_job()).
// Errors: LoRA adapters, the model file, a rank that did not answer in time.
StatusOr<JobStart> gather_job(Comm& c, const std::string& path, const LoadOptions& o);
// Rank 0: every worker is told the job will not run, and why; returns `why`.
Status refuse_job(Comm& c, const Status& why);
// The setup message's load options, every plan's (each adds its placement).
json setup_message(const LoadOptions& o);
// A worker's load options: its own command line's and rank 0's setup_message().
LoadOptions worker_load_options(const WorkerOptions& o, const json& setup);

// A part the plan found fits is held in memory (no budget); one that does
// not streams from this rank's disk under its --mem-budget, with the rates
// measured at start (weights/placement.h).
void stream_under_budget(LoadOptions* lo, bool streams, uint64_t mem_budget, double disk_rate_cap,
                         const plan::Calibration* cal);
// A worker: stream_under_budget() as rank 0's setup says for `rank` (its
// "streams" entry), with the worker's own budget and cap.
void stream_as_setup_says(LoadOptions* lo, const json& setup, int rank, const WorkerOptions& o,
                          const plan::Calibration* cal);

// Rank 0, after its own load (`failures`: why it failed, or ""): every
// worker's load result, then the word to go on, or to stop when any failed.
// Returns every failure, "" when none.
StatusOr<std::string> start_job(Comm& c, std::string failures);
// A worker, after its load: the result to rank 0, then rank 0's word
// (start_job()). Errors: its load failed, the job did not start.
Status report_load(Comm& c, const StatusOr<LoadedModel>& lm);

}  // namespace sluice::dist
