// Test helper: chi-square goodness of fit for the speculative decoding tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sluice::spec::testing {

// Bins with expected count >= 5 each, the rest pooled into one. Returns the
// statistic minus the critical value at alpha = 1e-3 (Wilson-Hilferty
// approximation): <= 0 means "consistent with expected".
inline double chi_square_excess(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t n) {
  double stat = 0, pooled_e = 0;
  int64_t pooled_o = 0, bins = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e >= 5) {
      const double d = static_cast<double>(observed[i]) - e;
      stat += d * d / e;
      ++bins;
    } else {
      pooled_e += e;
      pooled_o += observed[i];
    }
  }
  if (pooled_e > 0) {
    const double d = static_cast<double>(pooled_o) - pooled_e;
    stat += d * d / std::max(pooled_e, 1e-3);
    ++bins;
  }
  const double df = static_cast<double>(std::max<int64_t>(1, bins - 1));
  const double z = 3.0902;  // upper 1e-3 quantile of N(0, 1)
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  return stat - crit;
}

}  // namespace sluice::spec::testing
