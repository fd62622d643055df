// StatsFeed: the metric registry as one JSON object, for the live page and
// for scripts (GET /stats, and GET /stats/stream as Server-Sent Events).
// The figures are the ones /metrics renders (the same registry read the same
// way), grouped the way a person reads them, plus per-second rates:
//
//   {"time": unix s, "uptime_s", "rate_window_s",      rates are over the last window
//    "model": Engine::describe_json() (or {}; the server makes it again when the fluid split moves the placement),
//    "requests": {"running", "waiting", "swapped", "http_in_flight",
//                 "finished": {"stop", "length", "abort", "error"}},
//    "kv": {"blocks_used", "blocks_total", "blocks_cached", "prefix_hit_ratio",
//           "preemptions", "fluid_units", "fluid_demotions", "fluid_promotions",
//           "preemptions_per_s"},     fluid_*: units (layers or groups of expert
//                                     slots) the fluid split gave the pool: now, given, taken back
//    "throughput": {"generated_tokens", "tokens_per_s", "requests_per_s"},
//    "latency": {"ttft_s" | "tpot_s" | "e2e_s": {"count", "mean", "p50", "p90",
//                "p99", "recent_mean"}},            quantiles since start; recent: the window
//    "legs": [{"leg", "series", "labels", "bytes", "bytes_per_s"}],
//            every byte counter: weights disk -> ram and ram -> compute, experts
//            disk -> slots and slots -> compute, rank -> rank links
//    "weights": {"stall_s", "overlap_efficiency", "resident_fraction"},
//    "experts": {"n_layer", "n_expert", "routed": [[tokens per expert] per layer]
//                (null for dense layers), "routed_per_s": same shape,
//                "layers": [{"layer", "resident", "recall", "precision",
//                "hit_rate"}] (when experts stream),
//                "per_expert": {"resident" (1: in a slot), "ready", "late",
//                "missed" (steps that chose it, by where it was), "predicted",
//                "predicted_chosen": each the shape of "routed"} (when experts
//                stream and the model has at most 8192 (layer, expert) pairs:
//                engine_metrics.h)},                           absent for dense models
//    "speculative": {"drafted", "accepted", "acceptance_rate", "tokens_per_pass"},
//    "metrics": {name: [{"labels": {...}, "value"} | {"labels", "count", "sum",
//                "p50", "p90", "p99"}]}}   every other series, as /metrics has it
//
// Rates: each snapshot is compared with a sample kept from an earlier one at
// least min_window_s older (shared by every client), so with one poller
// they cover its interval. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/metrics.h"
#include "server/expert_cells.h"

namespace sluice::server {

class StatsFeed {
 public:
  explicit StatsFeed(MetricRegistry& registry, double min_window_s = 0.5);

  // The snapshot now, as JSON text; model_json: the engine's description ("" -> {}).
  std::string snapshot_text(const std::string& model_json);
  // The same, parsed.
  nlohmann::ordered_json snapshot(const std::string& model_json);

 private:
  struct Sample {
    double t = -1;  // steady seconds; < 0: none yet
    std::map<std::string, double> values;  // "name{labels}" -> counter value (histograms: _sum, _count)
    std::vector<double> routed;            // sluice_expert_routed_total by cell [n_layer * n_expert]
  };
  // Rates per second of `now` against the kept sample (routed_per_s: of its
  // routed cells); rolls the samples.
  std::map<std::string, double> rates(const Sample& now, double* window_s, std::vector<double>* routed_per_s);

  MetricRegistry& registry_;
  double min_window_s_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;  // base_, last_
  Sample base_, last_;
  std::mutex snapshot_mu_;  // one snapshot at a time: cells_ (read first, then mu_)
  ExpertCells cells_;
};

// "a=\"1\",b=\"x\"" -> {"a": "1", "b": "x"} (Prometheus label syntax, escapes undone).
std::map<std::string, std::string> parse_labels(const std::string& labels);

}  // namespace sluice::server
