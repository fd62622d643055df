#include "plan/measure_rounds.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"

namespace sluice::plan {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

RoundsSummary summarize_rounds(std::span<const RoundFigures> rounds, double tolerance) {
  CHECK(!rounds.empty() && tolerance >= 0);
  std::vector<double> predicted, measured, ratios;
  RoundsSummary s{.n_rounds = static_cast<int>(rounds.size())};
  for (const RoundFigures& r : rounds) {
    CHECK(r.predicted > 0);
    predicted.push_back(r.predicted);
    measured.push_back(r.measured);
    ratios.push_back(r.ratio());
    if (std::abs(r.ratio() - 1.0) <= tolerance) ++s.n_within;
  }
  s.predicted = median(std::move(predicted));
  s.measured = median(std::move(measured));
  s.ratio = median(std::move(ratios));
  return s;
}

}  // namespace sluice::plan
