// Predicted against measured over several rounds: on a shared machine the
// memory and disk rates move from second to second, so one calibration beside
// one measurement scatters; `sluice plan --measure --rounds N` pairs a fresh
// calibration with a measurement N times and reports the medians here.
//
// Each round is one (predicted, measured) pair taken in the same seconds; the
// summary's ratio is the median of the rounds' own ratios, not the ratio of
// the medians, so a round is only ever compared with its own prediction.
// Plain functions on values; thread-safe.
#pragma once

#include <span>
#include <vector>

namespace sluice::plan {

// Middle value; the mean of the two middle values for an even count. NaN for
// an empty list.
double median(std::vector<double> values);

// One round: what was predicted from that round's calibration, and what the
// engine did right after it (tokens/s, or any rate where higher is faster).
struct RoundFigures {
  double predicted = 0;
  double measured = 0;
  double ratio() const { return measured / predicted; }  // measured / predicted
};

struct RoundsSummary {
  int n_rounds = 0;
  double predicted = 0;  // median over the rounds
  double measured = 0;   // median over the rounds
  double ratio = 0;      // median of the rounds' measured / predicted
  int n_within = 0;      // rounds with |measured / predicted - 1| <= tolerance
};

// Medians and the count within `tolerance` (0.15: within 15%) of `rounds`.
// Contract: rounds is not empty, every predicted > 0, tolerance >= 0.
RoundsSummary summarize_rounds(std::span<const RoundFigures> rounds, double tolerance);

}  // namespace sluice::plan
