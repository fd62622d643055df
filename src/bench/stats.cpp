#include "bench/stats.h"

#include <algorithm>
#include <cmath>

namespace sluice::bench {

Spread spread_of(std::vector<double> v) {
  Spread s;
  s.all = v;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  s.mean = mean_of(v);
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0.0;
  return s;
}

double median(std::vector<double> v) { return spread_of(std::move(v)).median; }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

Quantiles quantiles(const std::vector<double>& v) {
  return {.p50 = percentile(v, 0.5), .p90 = percentile(v, 0.9), .p99 = percentile(v, 0.99), .mean = mean_of(v)};
}

}  // namespace sluice::bench
