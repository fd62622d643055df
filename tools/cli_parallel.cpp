#include "cli_parallel.h"

#include <fmt/format.h>

namespace sluice::cli {

void add_parallel_options(CLI::App* c, ParallelArgs* args) {
  c->add_option("--parallel", args->mode,
                "run across the processes of an MPI job (mpirun -np N ...): pp = pipeline, each rank holds a range "
                "of layers and rank 0 the rest of the work; ep = experts (mixture-of-experts models), each rank "
                "holds a share of every routed layer's experts and rank 0 the rest of the model; pp,ep = both, the "
                "ranks in pipeline stages of --ep-size ranks, each stage's routed layers' experts split over its ranks")
      ->check(CLI::IsMember({"pp", "ep", "pp,ep", "ep,pp"}));
  c->add_option("--ep-size", args->ep_size,
                "with --parallel pp,ep: ranks per pipeline stage (its lead and expert ranks); the job's ranks must be "
                "a multiple of it (stages x E)");
  c->add_option("--micro-batches", args->micro_batches,
                "with --parallel pp or pp,ep: micro-batches each step is cut into (a long prompt in pieces), so "
                "that the stages work at once; 0 = the planner's fastest for each step's tokens")
      ->capture_default_str();
  c->add_option("--parallel-timeout", args->timeout_s,
                "seconds a rank waits for another during a step before the request fails and the job ends")
      ->capture_default_str();
  c->add_option("--ep-attention", args->ep_attention,
                "with --parallel ep, where attention (and the rest of the model but the routed experts) runs: rank0, "
                "every (each rank holds it and a KV pool; one exchange per routed layer) or auto (the planner's "
                "faster that fits)")
      ->check(CLI::IsMember({"auto", "rank0", "every"}))
      ->capture_default_str();
}

StatusOr<std::shared_ptr<dist::Session>> join_parallel(const ParallelArgs& args, const std::string& model,
                                                       const dist::WorkerOptions& worker,
                                                       std::optional<int>* worker_exit) {
  if (args.mode.empty()) return std::shared_ptr<dist::Session>();
  ASSIGN_OR_RETURN(std::shared_ptr<dist::Session> s,
                   dist::Session::start({.mode = args.mode, .ep_attention = args.ep_attention, .ep_size = args.ep_size,
                                         .timeout_s = args.timeout_s, .micro_batches = args.micro_batches}));
  if (!s->is_worker()) return s;
  const Status st = dist::run_worker(model, worker, *s);
  if (!st.ok()) fmt::print(stderr, "error: rank {}: {}\n", s->rank(), st.message());
  *worker_exit = st.ok() ? 0 : 1;
  return s;
}

}  // namespace sluice::cli
