#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace sluice {
namespace {

// Waiting first spins with pause; past kPauseSpins it yields the core on every
// try, so that on an oversubscribed machine (more runnable threads than cores)
// the thread being waited for gets to run instead of losing a whole time slice
// to a spinning peer. An idle worker sleeps after kIdleSpinSeconds.
constexpr int kPauseSpins = 2048;
constexpr double kIdleSpinSeconds = 200e-6;

void backoff(int* spins) {
  if (++*spins < kPauseSpins) {
    _mm_pause();
  } else {
    std::this_thread::yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job, then sleep until one arrives.
    int spins = 0;
    std::chrono::steady_clock::time_point idle_until{};
    while (generation_.load(std::memory_order_acquire) == seen) {
      backoff(&spins);
      if (spins < kPauseSpins || (spins & 15) != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      if (idle_until == std::chrono::steady_clock::time_point{}) {
        idle_until = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(kIdleSpinSeconds));
      }
      if (now < idle_until) continue;
      std::unique_lock<std::mutex> lock(mu_);
      n_sleeping_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      n_sleeping_.fetch_sub(1);
      break;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    n_done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_all(FunctionRef<void(int, int)> fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  n_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: ordered before the sleeper check below
  if (n_sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  fn(0, n_threads_);
  const int others = n_threads_ - 1;
  int spins = 0;
  while (n_done_.load(std::memory_order_acquire) != others) backoff(&spins);
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  run_on_all([&](int ti, int nt) {
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, chunk * ti);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::parallel_for_claimed(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  std::atomic<int64_t> next{0};
  run_on_all([&](int, int) {
    for (int64_t b = next.fetch_add(grain, std::memory_order_relaxed); b < n;
         b = next.fetch_add(grain, std::memory_order_relaxed)) {
      fn(b, std::min(n, b + grain));
    }
  });
}

}  // namespace sluice
