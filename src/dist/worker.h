// A worker stage: ranks > 0 of a pipelined job run their layer range here,
// step after step, as rank 0's messages say (protocol.h), until rank 0 ends
// the job.
//
//   wait for a StepMsg from rank 0 (no deadline: between requests a worker
//   idles; if rank 0 dies, the MPI launcher ends the job)
//   -> KV pool of rank 0's shape (created on first use or when it changes)
//   -> rank 0's block copies -> Model::begin_step (no embedding)
//   -> per micro-batch: hidden rows from the previous stage (deadline)
//      -> Model::run_stage -> rows to the next stage, or from the last
//         stage the rows asking for logits back to rank 0
//
// Buffers grow to the largest step and are kept: a step allocates nothing
// once they have. Not thread-safe: one loop per process.
#pragma once

#include <optional>
#include <vector>

#include "dist/comm.h"
#include "dist/protocol.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace sluice::dist {

// A worker's next step from rank 0 (waited for without a deadline): the
// message into *msg, *kv a pool of rank 0's shape (created on first use or
// when the shape changes) with rank 0's copy-on-write block copies applied,
// *seqs the step's sequences (views into *msg). nullopt: rank 0's shutdown.
// Shared by the pipeline's workers and expert parallelism's with attention on
// every rank (expert_parallel.h). Errors: a receive failed, a malformed
// message, the pool cannot be created.
StatusOr<std::optional<StepView>> receive_step(Comm& comm, Model& model, std::vector<uint8_t>* msg,
                                               std::optional<KvStore>* kv, std::vector<ForwardSeq>* seqs);

// Runs until rank 0's shutdown (OK) or a failure (its error).
Status run_worker_loop(Comm& comm, Model& model, int n_stages);

}  // namespace sluice::dist
