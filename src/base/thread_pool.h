// ThreadPool: a persistent pool of workers for data-parallel kernels.
//
// Threads are created once in the constructor and live until destruction; the
// hot path (parallel_for) neither creates threads nor allocates. parallel_for is
// meant to be called from one thread at a time (the engine's step thread); it
// blocks until every chunk has run. The calling thread takes part in the work,
// so a pool of n threads runs n - 1 workers plus the caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  // fn must split the work itself; used for kernels that partition by thread.
  void run_on_all(const std::function<void(int, int)>& fn);

  // Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int n_pending_ = 0;
  bool stop_ = false;
};

}  // namespace sluice
