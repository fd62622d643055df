#include "dist/job_failure.h"

#include <chrono>

#include <fmt/format.h>

namespace sluice::dist {

JobFailure::~JobFailure() {
  if (watchdog_.joinable()) watchdog_.detach();
}

void JobFailure::fail(const Status& st) {
  if (failed_.exchange(true)) return;
  failure_ = st;
  fmt::print(stderr, "error: {} failed: {}; the job ends in {:.0f} s\n", what_, st.message(), grace_s_);
  // By value: the thread is detached when the driver goes, and still ends the job.
  watchdog_ = std::thread([&comm = comm_, grace = grace_s_] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    comm.abort(1);
  });
}

}  // namespace sluice::dist
