// ThreadPool: a persistent pool of workers for data-parallel kernels.
//
// Threads are created once in the constructor and live until destruction; the
// hot path (run_on_all / parallel_for) neither creates threads nor allocates nor
// takes a lock while workers are awake. Dispatch is an atomic generation counter:
// workers spin on it (with pause, then yielding the core) for a short while
// after each job, so the ~hundred operator dispatches of one decode step cost
// about a microsecond each; idle workers then sleep on a condition variable and
// are woken by the next job. Yielding keeps an oversubscribed machine (several
// pools, or other processes) from losing whole time slices to spinning.
// run_on_all is meant to be called from one thread at a time (the engine's step
// thread) and blocks until every thread has finished. The calling thread takes
// part as thread 0, so a pool of n threads has n - 1 workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace sluice {

class ThreadPool {
 public:
  // n_threads <= 0 means "one per hardware core".
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread (caller is index 0).
  // fn must split the work itself.
  void run_on_all(FunctionRef<void(int, int)> fn);

  // Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread.
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn);
  // Runs fn(begin, end) over [0, n) in runs of `grain` (the last may be
  // shorter) that the threads claim in turn: a thread the machine slows down
  // takes fewer, so the others do not wait for it at the end. Any thread may
  // run any run; each index is covered exactly once.
  void parallel_for_claimed(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const FunctionRef<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> n_done_{0};
  std::atomic<int> n_sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace sluice
