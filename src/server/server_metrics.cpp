#include "server/server_metrics.h"

#include <fmt/format.h>

namespace sluice::server {

namespace {
constexpr const char* kRequests = "sluice_server_requests_total";
constexpr const char* kRequestsHelp = "HTTP requests by endpoint and outcome";
}  // namespace

const char* outcome_for_status(int s) {
  switch (s) {
    case 200: return "ok";
    case 400: return "invalid_request";
    case 401: return "unauthorized";
    case 404: return "not_found";
    case 413: return "too_large";
    case 429: return "rate_limited";
    case 503: return "unavailable";
    default: return s < 400 ? "ok" : "error";
  }
}

ServerMetrics::ServerMetrics(MetricRegistry& r) : registry_(r) {
  in_flight_ = r.gauge("sluice_server_http_in_flight", "HTTP requests being handled (open streams included)");
  for (const char* endpoint : {"completions", "chat.completions"}) {
    for (const char* outcome : {"ok", "cancelled", "invalid_request", "unauthorized", "not_found", "too_large",
                                "rate_limited", "unavailable", "error"}) {
      r.counter(kRequests, kRequestsHelp, fmt::format("endpoint=\"{}\",outcome=\"{}\"", endpoint, outcome));
    }
  }
}

void ServerMetrics::count_request(const std::string& endpoint, const std::string& outcome) {
  registry_.counter(kRequests, kRequestsHelp, fmt::format("endpoint=\"{}\",outcome=\"{}\"", endpoint, outcome))->add(1);
}

}  // namespace sluice::server
