// Statistics of benchmark repetitions and of per-request timings: the spread
// of a set of runs (median as the headline, min / max / stddev), exact
// percentiles (linear between order statistics) and means. Pure functions,
// no I/O; an empty input gives zeros.
#pragma once

#include <vector>

namespace sluice::bench {

// The spread of one test's figures over its repetitions.
struct Spread {
  std::vector<double> all;  // as given, in order
  double median = 0, min = 0, max = 0, mean = 0;
  double stddev = 0;  // sample standard deviation (n - 1); 0 for one value
};
Spread spread_of(std::vector<double> v);

// The median: the middle value, or the mean of the two middle ones.
double median(std::vector<double> v);

// Exact q-quantile (q in 0..1) of the values, linear between order statistics
// (numpy's default): q = 0.5 of {1, 2, 3, 4} is 2.5.
double percentile(std::vector<double> v, double q);

double mean_of(const std::vector<double>& v);

// What bench-serve reports per latency (TTFT, TPOT, E2E).
struct Quantiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};
Quantiles quantiles(const std::vector<double>& v);

}  // namespace sluice::bench
