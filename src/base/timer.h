// Monotonic wall-clock helpers for summaries and benchmarks.
#pragma once

#include <chrono>

namespace sluice {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Measures elapsed seconds since construction or the last reset().
class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  void reset() { start_ = now_seconds(); }
  double seconds() const { return now_seconds() - start_; }

 private:
  double start_;
};

}  // namespace sluice
