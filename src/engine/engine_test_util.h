// Test helpers for the engine's tests: a collector of many requests' events,
// and the prompts they send.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sluice/engine.h"
#include "tokenizer/tokenizer.h"

namespace sluice::testing {

// Collects events of many requests; wait() blocks until all have finished.
class Collector {
 public:
  EventCallback callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      auto& r = results_[ev.request];
      if (ev.token >= 0) r.tokens[ev.index].push_back(ev.token);
      r.text[ev.index] += ev.text;
      if (ev.finished) r.reason[ev.index] = ev.finish_reason;
      if (ev.timings) {
        r.timings = *ev.timings;
        ++n_done_;
        cv_.notify_all();
      }
    };
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return n_done_ >= n; }));
  }
  struct Result {
    std::map<int, std::vector<int32_t>> tokens;
    std::map<int, std::string> text;
    std::map<int, FinishReason> reason;
    RequestTimings timings;
  };
  std::map<RequestId, Result> results_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_done_ = 0;
};

inline std::vector<int32_t> prompt_of(const Tokenizer& tok, int i) {
  static const char* kPrompts[] = {"Once upon a time", "Lily and Tim went to the park.", "The cat",
                                   "One day, a little boy named Tom found a big red ball in the garden. He", "Hello"};
  std::string p = kPrompts[i % 5];
  for (int k = 0; k < i % 3; ++k) p += " and then";
  return tok.encode(p, true);
}

}  // namespace sluice::testing
