#include "base/thread_pool.h"

#include <algorithm>
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

TEST(ThreadPool, ClaimedRunsCoverTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 5, 16, 1001}) {
    for (int64_t grain : {0, 1, 3, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_runs{0};
      pool.parallel_for_claimed(n, grain, [&](int64_t b, int64_t e) {
        if (!(b < e && e - b <= std::max<int64_t>(1, grain))) bad_runs.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      EXPECT_EQ(bad_runs.load(), 0) << "n " << n << " grain " << grain;
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " i " << i;
    }
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
