// ServerMetrics: the HTTP layer's figures in the one metric registry
// (base/metrics.h). /metrics renders that registry whole, so the engine's series
// (sluice_requests_running/_waiting, sluice_kv_blocks_used/_total,
// sluice_prefix_cache_hit_ratio, sluice_preemptions_total, the TTFT / TPOT /
// e2e / prompt / generation histograms: engine/engine_metrics.h) and any other
// module's appear beside these without being copied:
//
//   sluice_server_requests_total{endpoint,outcome}   counter; outcome: ok, cancelled,
//       invalid_request, unauthorized, not_found, too_large, rate_limited,
//       unavailable, error
//   sluice_server_http_in_flight                     gauge (open streams included)
//
// Every method is thread-safe.
#pragma once

#include <string>

#include "base/metrics.h"

namespace sluice::server {

// The outcome label for an HTTP status (200 -> "ok", 429 -> "rate_limited", ...).
const char* outcome_for_status(int http_status);

class ServerMetrics {
 public:
  // Registers the series (every endpoint x outcome starts at 0).
  explicit ServerMetrics(MetricRegistry& registry);

  // Counts one finished HTTP request. endpoint: "completions", "chat.completions",
  // "models", "other"; outcome from outcome_for_status, or "cancelled".
  void count_request(const std::string& endpoint, const std::string& outcome);
  void add_in_flight(double delta) { in_flight_->add(delta); }

 private:
  MetricRegistry& registry_;
  Gauge* in_flight_;
};

}  // namespace sluice::server
