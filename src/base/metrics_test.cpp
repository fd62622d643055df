#include "base/metrics.h"

#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// The registry's Prometheus text has each of `lines`.
void expect_exposition_has(const MetricRegistry& r, std::initializer_list<const char*> lines) {
  const std::string text = r.render_prometheus();
  for (const char* line : lines) EXPECT_NE(text.find(line), std::string::npos) << line;
}

TEST(Metrics, CountersAndGaugesByLabel) {
  MetricRegistry r;
  Counter* disk = r.counter("sluice_weight_bytes_read_total", "Weight bytes read", "tier=\"disk\"");
  Counter* host = r.counter("sluice_weight_bytes_read_total", "Weight bytes read", "tier=\"host\"");
  EXPECT_EQ(disk, r.counter("sluice_weight_bytes_read_total", "Weight bytes read", "tier=\"disk\""));
  disk->add(100);
  host->add(5);
  r.gauge("sluice_running", "Running sequences")->set(3);
  EXPECT_EQ(r.value("sluice_weight_bytes_read_total", "tier=\"disk\""), 100);
  EXPECT_EQ(r.value("sluice_running"), 3);
  EXPECT_EQ(r.value("missing"), 0);
  expect_exposition_has(r, {"# TYPE sluice_weight_bytes_read_total counter",
                            "sluice_weight_bytes_read_total{tier=\"disk\"} 100", "sluice_running 3"});
}

TEST(Metrics, HistogramBucketsAreCumulativeAndQuantilesInterpolate) {
  MetricRegistry r;
  Histogram* h = r.histogram("sluice_ttft_seconds", "Time to first token", {0.1, 0.2, 0.4});
  for (double v : {0.05, 0.15, 0.15, 0.3, 1.0}) h->observe(v);
  EXPECT_EQ(h->count(), 5u);
  EXPECT_DOUBLE_EQ(h->sum(), 1.65);
  EXPECT_EQ(h->cumulative_count(0), 1u);
  EXPECT_EQ(h->cumulative_count(1), 3u);
  EXPECT_EQ(h->cumulative_count(2), 4u);
  EXPECT_GT(h->quantile(0.5), 0.1);
  EXPECT_LE(h->quantile(0.5), 0.2);
  expect_exposition_has(r, {"sluice_ttft_seconds_bucket{le=\"0.2\"} 3", "sluice_ttft_seconds_bucket{le=\"+Inf\"} 5",
                            "sluice_ttft_seconds_count 5"});
}

// series_count() moves exactly when a series is created, so a reader that keeps
// the metrics visit() hands out knows when to visit again; visit's filter skips
// whole families.
TEST(Metrics, SeriesCountAndVisitHandOutTheRegistrysOwnMetrics) {
  MetricRegistry r;
  EXPECT_EQ(r.series_count(), 0u);
  Counter* c = r.counter("a_total", "a", "k=\"1\"");
  Gauge* g = r.gauge("b", "b");
  Histogram* h = r.histogram("c_seconds", "c", {1.0});
  EXPECT_EQ(r.series_count(), 3u);
  r.counter("a_total", "a", "k=\"1\"");  // already there
  r.gauge("b", "b")->set(2);
  EXPECT_EQ(r.series_count(), 3u);
  r.counter("a_total", "a", "k=\"2\"");
  EXPECT_EQ(r.series_count(), 4u);

  std::vector<std::string> seen;
  r.visit(
      [&](const MetricSeries& s) {
        seen.push_back(s.name + "{" + s.labels + "}");
        if (s.name == "b") {
          EXPECT_EQ(s.gauge, g);
          EXPECT_EQ(s.counter, nullptr);
          EXPECT_EQ(s.histogram, nullptr);
          EXPECT_EQ(s.value, 2);
        } else if (s.name == "a_total") {
          ASSERT_NE(s.counter, nullptr);
          EXPECT_EQ(s.counter == c, s.labels == "k=\"1\"");
          EXPECT_EQ(s.gauge, nullptr);
        } else {
          ADD_FAILURE() << "a family the filter refused: " << s.name;
        }
      },
      [](const std::string& family) { return family != "c_seconds"; });
  EXPECT_EQ(seen, (std::vector<std::string>{"a_total{k=\"1\"}", "a_total{k=\"2\"}", "b{}"}));
  seen.clear();
  r.visit([&](const MetricSeries& s) {
    seen.push_back(s.name);
    if (s.kind == MetricKind::kHistogram) {
      EXPECT_EQ(s.histogram, h);
    }
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"a_total", "a_total", "b", "c_seconds"}));
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricRegistry r;
  Counter* c = r.counter("c_total", "c");
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.emplace_back([&] { for (int k = 0; k < 10000; ++k) c->add(1); });
  for (auto& t : ts) t.join();
  EXPECT_EQ(c->value(), 40000);
}

}  // namespace
}  // namespace sluice
