#include "plan/rate_curve.h"

#include <algorithm>
#include <cmath>

namespace sluice::plan {

RateCurve::RateCurve(std::vector<RatePoint> points) {
  for (const RatePoint& p : points) {
    if (p.n_tokens <= 0 || !(p.rate > 0)) continue;
    auto it = std::lower_bound(points_.begin(), points_.end(), p.n_tokens,
                               [](const RatePoint& q, int64_t n) { return q.n_tokens < n; });
    if (it != points_.end() && it->n_tokens == p.n_tokens) it->rate = p.rate;
    else points_.insert(it, p);
  }
}

double RateCurve::at(double n) const {
  if (points_.empty()) return 0;
  const RatePoint& lo = points_.front();
  if (n <= static_cast<double>(lo.n_tokens)) return lo.rate;
  for (size_t i = 1; i < points_.size(); ++i) {
    const RatePoint &a = points_[i - 1], &b = points_[i];
    if (n > static_cast<double>(b.n_tokens)) continue;
    const double t = std::log2(n / static_cast<double>(a.n_tokens)) /
                     std::log2(static_cast<double>(b.n_tokens) / static_cast<double>(a.n_tokens));
    return a.rate + (b.rate - a.rate) * t;
  }
  return points_.back().rate;
}

}  // namespace sluice::plan
