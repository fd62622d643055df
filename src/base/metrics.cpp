#include "base/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"

namespace sluice {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i + 1 < bounds_.size(); ++i) CHECK(bounds_[i] < bounds_[i + 1]);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

uint64_t Histogram::cumulative_count(size_t i) const {
  uint64_t c = 0;
  for (size_t k = 0; k <= i && k <= bounds_.size(); ++k) c += buckets_[k].load(std::memory_order_relaxed);
  return c;
}

double Histogram::quantile(double q) const {
  const uint64_t n = count();
  if (n == 0) return 0.0;
  const double rank = q * static_cast<double>(n);
  uint64_t below = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    const uint64_t in = buckets_[i].load(std::memory_order_relaxed);
    if (static_cast<double>(below + in) >= rank && in > 0) {
      if (i == bounds_.size()) return bounds_.empty() ? 0.0 : bounds_.back();
      const double lo = i == 0 ? 0.0 : bounds_[i - 1];
      const double frac = (rank - static_cast<double>(below)) / static_cast<double>(in);
      return lo + (bounds_[i] - lo) * std::clamp(frac, 0.0, 1.0);
    }
    below += in;
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

std::vector<double> exponential_buckets(double start, double factor, int n) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < n; ++i, v *= factor) b.push_back(v);
  return b;
}

MetricRegistry::Family& MetricRegistry::family(const std::string& name, Kind kind, const std::string& help) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  }
  CHECK(it->second.kind == kind && "metric registered twice with different kinds");
  return it->second;
}

template <typename M, typename... Args>
M* MetricRegistry::series(std::map<std::string, std::unique_ptr<M>>& in, const std::string& labels, Args&&... args) {
  auto& slot = in[labels];
  if (!slot) {
    slot = std::make_unique<M>(std::forward<Args>(args)...);
    series_count_.fetch_add(1, std::memory_order_release);
  }
  return slot.get();
}

Counter* MetricRegistry::counter(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return series(family(name, Kind::kCounter, help).counters, labels);
}

Gauge* MetricRegistry::gauge(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return series(family(name, Kind::kGauge, help).gauges, labels);
}

Histogram* MetricRegistry::histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                                     const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return series(family(name, Kind::kHistogram, help).histograms, labels, std::move(bounds));
}

double MetricRegistry::value(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0.0;
  if (auto c = it->second.counters.find(labels); c != it->second.counters.end()) return c->second->value();
  if (auto g = it->second.gauges.find(labels); g != it->second.gauges.end()) return g->second->value();
  return 0.0;
}

namespace {

std::string fmt_value(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::abs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.9g}", v);
}

std::string with_labels(const std::string& name, const std::string& labels, const std::string& extra = "") {
  std::string all = labels;
  if (!extra.empty()) all = all.empty() ? extra : all + "," + extra;
  return all.empty() ? name : name + "{" + all + "}";
}

}  // namespace

std::string MetricRegistry::render_prometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::kCounter ? "counter" : f.kind == Kind::kGauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, c] : f.counters) out += fmt::format("{} {}\n", with_labels(name, labels), fmt_value(c->value()));
    for (const auto& [labels, g] : f.gauges) out += fmt::format("{} {}\n", with_labels(name, labels), fmt_value(g->value()));
    for (const auto& [labels, h] : f.histograms) {
      const auto& b = h->upper_bounds();
      for (size_t i = 0; i < b.size(); ++i) {
        out += fmt::format("{} {}\n", with_labels(name + "_bucket", labels, fmt::format("le=\"{}\"", fmt_value(b[i]))),
                           h->cumulative_count(i));
      }
      out += fmt::format("{} {}\n", with_labels(name + "_bucket", labels, "le=\"+Inf\""), h->count());
      out += fmt::format("{} {}\n", with_labels(name + "_sum", labels), fmt_value(h->sum()));
      out += fmt::format("{} {}\n", with_labels(name + "_count", labels), h->count());
    }
  }
  return out;
}

MetricRegistry& global_metrics() {
  static MetricRegistry registry;
  return registry;
}

}  // namespace sluice
