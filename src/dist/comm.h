// Comm: the processes of one job and the messages between them, over MPI.
//
// Every call that waits has a deadline: a peer that died or hangs makes it
// return an error naming the peer and what was awaited, never block forever
// (MPI_ERRORS_RETURN is set on the job's communicator, so MPI reports errors
// instead of aborting the job; waits poll MPI_Test and sleep between polls, so
// an idle wait leaves the cores to the compute threads).
//
//   Comm::init() once per process (MPI_Init_thread, MPI_THREAD_MULTIPLE),
//   then isend/irecv + wait, or the blocking send/recv with the timeout;
//   bytes sent are counted per destination. abort() ends the whole job with a
//   non-zero exit (MPI_Abort): the way out after a peer failed.
//
// split() makes a sub-communicator of a job (pp,ep: the pipeline's stage
// leads, each stage's group of expert ranks): the same deadlines, its ranks
// numbered within it; errors name a peer by its rank in the job
// (world_rank()), and abort() ends the whole job.
//
// Built without MPI (CMake found none), init() says so and nothing else
// exists. Thread-safe (MPI_THREAD_MULTIPLE); the counters are atomics.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::dist {

// Whether this build has MPI (SLUICE_HAVE_MPI).
bool have_mpi();

// One message in flight (an MPI_Request); moved, not copied.
struct Pending {
  uint64_t handle = 0;  // the MPI_Request's bits; 0: none (done)
  int peer = -1;
  int tag = 0;
  bool active() const { return handle != 0; }
};

class Comm {
 public:
  // Joins the job (MPI_Init_thread, once per process) on a duplicate of
  // MPI_COMM_WORLD with MPI_ERRORS_RETURN. timeout_s: what every wait allows.
  // Errors: built without MPI; MPI did not give MPI_THREAD_MULTIPLE.
  static StatusOr<std::unique_ptr<Comm>> init(double timeout_s);
  // The processes of this communicator with the same `color` (>= 0) as
  // one new communicator, ranked by `key` (MPI_Comm_split); a negative color:
  // this process joins none (null). Collective: every process of this one
  // calls it. Errors: an MPI error.
  StatusOr<std::unique_ptr<Comm>> split(int color, int key) const;
  // MPI_Finalize (the job's own communicator, unless the job was aborted);
  // MPI_Comm_free (one made by split()).
  ~Comm();

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // The host this process runs on (MPI_Get_processor_name).
  const std::string& host() const { return host_; }
  // Rank r of this communicator as a rank of the job (r itself but for split()'s).
  int world_rank(int r) const { return world_ranks_[static_cast<size_t>(r)]; }

  // Starts sending / receiving `bytes` at `data` (which must stay valid, and
  // for a send unchanged, until wait()).
  StatusOr<Pending> isend(int dest, int tag, const void* data, size_t bytes);
  StatusOr<Pending> irecv(int src, int tag, void* data, size_t bytes);
  // Waits until `p` completes, at most timeout_s (a received message must fill
  // exactly the bytes posted). `what` names the message in the error.
  // Errors: deadline passed (the request is cancelled), an MPI error.
  Status wait(Pending& p, const char* what);
  // Blocking forms: isend/irecv + wait.
  Status send(int dest, int tag, const void* data, size_t bytes, const char* what);
  Status recv(int src, int tag, void* data, size_t bytes, const char* what);
  // Receives one message of any length from src into *out (resized), waiting
  // at most timeout_s, or forever when timeout_s <= 0 is passed as `timeout`
  // (a worker idle between requests: its peer's death ends the job).
  Status recv_message(int src, int tag, std::vector<uint8_t>* out, const char* what, double timeout);

  // Bytes sent to `peer` since init.
  uint64_t bytes_sent(int peer) const { return sent_[static_cast<size_t>(peer)].load(std::memory_order_relaxed); }
  // Seconds on a clock every rank reads alike (MPI_Wtime).
  static double wtime();
  // Ends every process of the job with `code` (MPI_Abort); does not return.
  [[noreturn]] void abort(int code);

 private:
  Comm() = default;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_ = 60;
  std::string host_;
  uint64_t comm_ = 0;  // the MPI_Comm's bits
  bool finalizes_ = true;  // the job's own (init()): MPI_Finalize at its end
  std::vector<int> world_ranks_;  // [size] rank r's in the job
  std::unique_ptr<std::atomic<uint64_t>[]> sent_;
};

}  // namespace sluice::dist
