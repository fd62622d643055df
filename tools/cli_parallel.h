// --parallel: one command run by every process of an MPI job (mpirun -np N
// sluice run|bench|serve|bench-serve ... --parallel pp|ep|pp,ep). Rank 0
// runs the command; the other ranks become workers that hold layer ranges
// (pp), shares of the experts (ep), or a stage's range and a share of its
// experts (pp,ep --ep-size E) (dist/session.h) and return when rank 0 ends
// the job.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "dist/session.h"

namespace sluice::cli {

struct ParallelArgs {
  std::string mode;        // "" (one process), pp, ep, pp,ep
  int64_t ep_size = 0;     // --ep-size: pp,ep's ranks per pipeline stage
  double timeout_s = 60;   // --parallel-timeout
  std::string ep_attention = "auto";  // --ep-attention rank0|every|auto
  int64_t micro_batches = 0;          // --micro-batches (0: the plan's choice)
};

// Adds --parallel MODE, --ep-size E, --ep-attention, --micro-batches N and --parallel-timeout SECONDS to a
// subcommand.
void add_parallel_options(CLI::App* c, ParallelArgs* args);

// Without --parallel: null, nothing happens. With it: joins the job; on a
// worker rank runs the worker until the job ends and sets *worker_exit to the
// exit code the command must return; on rank 0 returns the session to load
// through. Errors (rank 0): the job cannot start (no MPI, a bad mode).
StatusOr<std::shared_ptr<dist::Session>> join_parallel(const ParallelArgs& args, const std::string& model,
                                                       const dist::WorkerOptions& worker,
                                                       std::optional<int>* worker_exit);

}  // namespace sluice::cli
