#include "base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ThreadPool, EveryThreadRunsEachJobOnce) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    for (int job = 0; job < 200; ++job) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run_on_all([&](int ti, int nt) {
        EXPECT_EQ(nt, n);
        hits[static_cast<size_t>(ti)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 10, 1001}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  }
}

TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.run_on_all([&](int, int) { sum.fetch_add(1); });
  // Long enough for the worker to stop spinning and sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  pool.run_on_all([&](int, int) { sum.fetch_add(1); });
  EXPECT_EQ(sum.load(), 4);
}

}  // namespace
}  // namespace sluice
