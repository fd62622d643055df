// RateCurve: a rate measured at a few batch sizes, read at any size.
//
// A kernel's rate depends on how many rows (tokens) it multiplies at once: at
// a few rows every weight is read for little work, at many the tiles fill. On
// one Zen 5 core the engine's Q8_0 layer runs at 0.30 TFLOP/s over 8 tokens,
// 0.45 over 16 and 0.55 over 64 (a 110m model's prefill), so a plan that cuts
// a step into micro-batches of 16 rows cannot take the 64-row rate for them.
//
//   at(n) for n between two measured sizes a <= n <= b:
//     linear in log2(n):   r(a) + (r(b) - r(a)) x log2(n / a) / log2(b / a)
//   below the smallest and above the largest: that end's rate
//
// Below the smallest size the time of a pass is set by reading the weights,
// which the callers' roofline takes as max(read, compute) from a measured read
// rate; a rate falling with n there would count the read twice.
//
// Points are kept sorted by size; a size given twice keeps the later rate.
// Empty: at() is 0 (callers fall back to their single figure).
#pragma once

#include <cstdint>
#include <vector>

namespace sluice::plan {

struct RatePoint {
  int64_t n_tokens = 0;  // rows multiplied at once, > 0
  double rate = 0;       // > 0, in the caller's unit (TFLOP/s for matmuls)
};

class RateCurve {
 public:
  RateCurve() = default;
  // Points with n_tokens <= 0 or rate <= 0 (a probe that failed) are dropped.
  explicit RateCurve(std::vector<RatePoint> points);

  bool empty() const { return points_.empty(); }
  const std::vector<RatePoint>& points() const { return points_; }
  // The rate at n rows (the header's rule).
  double at(double n_tokens) const;
  // at(n), or `fallback` when the curve is empty.
  double at_or(double n_tokens, double fallback) const { return empty() ? fallback : at(n_tokens); }

 private:
  std::vector<RatePoint> points_;  // sorted by n_tokens, unique
};

}  // namespace sluice::plan
