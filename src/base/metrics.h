// MetricRegistry: the one place every counter a user would want lives.
//
// The CLI summaries, `sluice bench`, the server's /metrics and the benchmarks all
// read the same registry, so a figure means the same thing everywhere.
//
//   Counter    monotonically increasing (bytes read, tokens generated, preemptions)
//   Gauge      a value that goes up and down (running requests, KV blocks used)
//   Histogram  observations in fixed buckets + sum + count (TTFT, TPOT, latency)
//
// Metrics are created once (at startup; creation takes a lock) and the returned
// pointers stay valid for the registry's lifetime. Updating a metric is lock-free
// (relaxed atomics), so hot paths can count without contention. Rendering takes
// the creation lock only. Names follow Prometheus conventions
// (`sluice_weight_bytes_read_total{tier="disk"}`).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice {

class Counter {
 public:
  void add(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // upper_bounds: increasing bucket bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative count of observations <= bounds_[i] (i == size(): all).
  uint64_t cumulative_count(size_t i) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Estimated quantile (0..1) by linear interpolation within a bucket.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative), + overflow
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

// Exponential bucket bounds: start, start*factor, ... (n bounds).
std::vector<double> exponential_buckets(double start, double factor, int n);

enum class MetricKind { kCounter, kGauge, kHistogram };

// One series as visit() hands it out: a counter's or gauge's value, or a
// histogram (value: its count). The pointers are the registry's own metric
// (the one that matches `kind`, the others null); like every metric, it stays
// where it is for the registry's life, so a reader may keep it and read it
// later without visiting again.
struct MetricSeries {
  const std::string& name;
  const std::string& labels;  // Prometheus syntax, "" when none
  MetricKind kind;
  double value;
  const Histogram* histogram;  // kHistogram only, else null
  const Counter* counter = nullptr;  // kCounter only
  const Gauge* gauge = nullptr;      // kGauge only
};

class MetricRegistry {
 public:
  // Returns the metric with this name and label set, creating it on first use.
  // labels: "key=\"value\",key2=\"value2\"" in Prometheus syntax, or "".
  Counter* counter(const std::string& name, const std::string& help, const std::string& labels = "");
  Gauge* gauge(const std::string& name, const std::string& help, const std::string& labels = "");
  Histogram* histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                       const std::string& labels = "");

  // Current value of a counter or gauge, or 0 if it does not exist.
  double value(const std::string& name, const std::string& labels = "") const;

  // Prometheus text exposition format (version 0.0.4).
  std::string render_prometheus() const;

  // How many series exist: it changes exactly when one is created, so a
  // reader that kept series pointers knows when to look for new ones.
  uint64_t series_count() const { return series_count_.load(std::memory_order_acquire); }

  // Calls fn for every series, families in name order (what /metrics renders,
  // for other renderings). Holds the creation lock: fn must not create metrics.
  template <typename Fn>
  void visit(Fn&& fn) const {
    visit(std::forward<Fn>(fn), [](const std::string&) { return true; });
  }
  // The same, for the families whose name `want` accepts (asked once a
  // family): the series of the others are not walked at all.
  template <typename Fn, typename Want>
  void visit(Fn&& fn, Want&& want) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, f] : families_) {
      if (!want(name)) continue;
      for (const auto& [labels, c] : f.counters)
        fn(MetricSeries{name, labels, MetricKind::kCounter, c->value(), nullptr, c.get(), nullptr});
      for (const auto& [labels, g] : f.gauges)
        fn(MetricSeries{name, labels, MetricKind::kGauge, g->value(), nullptr, nullptr, g.get()});
      for (const auto& [labels, h] : f.histograms)
        fn(MetricSeries{name, labels, MetricKind::kHistogram, static_cast<double>(h->count()), h.get()});
    }
  }

 private:
  using Kind = MetricKind;
  struct Family {
    Kind kind;
    std::string help;
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, Kind kind, const std::string& help);
  // The series of `labels` in one of a family's maps, made from args (and
  // counted) when new. Under mu_.
  template <typename M, typename... Args>
  M* series(std::map<std::string, std::unique_ptr<M>>& in, const std::string& labels, Args&&... args);

  mutable std::mutex mu_;
  std::atomic<uint64_t> series_count_{0};
  std::map<std::string, Family> families_;
};

// The process-wide registry the engine, server and CLI report through.
MetricRegistry& global_metrics();

}  // namespace sluice
