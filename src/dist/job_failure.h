// JobFailure: a job driver's first failure, latched, and the job's end after
// a grace period.
//
// The first fail() keeps its status, prints "error: <what> failed: ...; the
// job ends in N s" and starts a watchdog that aborts every process of the job
// (Comm::abort) after the grace: the requests in flight get their errors in
// the meantime. Later failures are ignored (the first is the cause). guard()
// runs a step of the driver: once failed, it returns the failure without
// running; a step that fails fails the job.
//
// Threads: fail() and failed() may be called from any thread; status() once
// failed() is true.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "dist/comm.h"
#include "sluice/status.h"

namespace sluice::dist {

class JobFailure {
 public:
  // what: the driver, as the message names it ("the pipeline").
  JobFailure(Comm& comm, double grace_s, std::string what) : comm_(comm), grace_s_(grace_s), what_(std::move(what)) {}
  ~JobFailure();
  JobFailure(const JobFailure&) = delete;
  JobFailure& operator=(const JobFailure&) = delete;

  bool failed() const { return failed_.load(); }
  const Status& status() const { return failure_; }
  void fail(const Status& st);
  // The failure if the job has failed; else step(), failing the job with its
  // error (when fail_on_error; a worker returns its error to its caller).
  template <typename Step>
  Status guard(Step&& step, bool fail_on_error = true) {
    if (failed()) return failure_;
    Status st = step();
    if (!st.ok() && fail_on_error) {
      fail(st);
      return failure_;
    }
    return st;
  }

 private:
  Comm& comm_;
  double grace_s_;
  std::string what_;
  std::atomic<bool> failed_{false};
  Status failure_;
  std::thread watchdog_;
};

}  // namespace sluice::dist
