// HttpServer's live view: GET / (the page), GET /stats (StatsFeed's JSON) and
// GET /stats/stream (the same, as Server-Sent Events every interval_ms).
// /stats and /stats/stream need the API key when one is set (the page itself
// holds no data and is served to anyone; it asks for the key).
#include <chrono>
#include <thread>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "server/openai_request.h"
#include "server/sse.h"
#include "server/web_page.h"

namespace sluice::server {
namespace {

constexpr int kMinIntervalMs = 200, kMaxIntervalMs = 10000, kDefaultIntervalMs = 1000;

void deny(httplib::Response& res) {
  const ApiError e =
      api_error(401, "invalid_request_error", "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)");
  res.status = 401;
  res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump_json(e.body()), "application/json");
}

}  // namespace

std::string HttpServer::model_json() {
  if (!ready_.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(model_json_mu_);
  // Made once, and again when the placement moved (the fluid split).
  const uint64_t version = engine_->placement_version();
  if (model_json_.empty() || version != model_json_version_) {
    model_json_ = engine_->describe_json();
    model_json_version_ = version;
  }
  return model_json_;
}

void HttpServer::handle_page(const httplib::Request&, httplib::Response& res) {
  // Inline script and style only; nothing from elsewhere, no framing.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  const std::string_view page = web_page();
  res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
}

void HttpServer::handle_stats(const httplib::Request& req, httplib::Response& res) {
  if (!authorized(req)) return deny(res);
  res.set_header("Cache-Control", "no-cache");
  res.set_content(stats_.snapshot_text(model_json()), "application/json");
}

void HttpServer::handle_stats_stream(const httplib::Request& req, httplib::Response& res) {
  if (!authorized(req)) return deny(res);
  int interval_ms = kDefaultIntervalMs;
  if (req.has_param("interval_ms")) {
    const std::string v = req.get_param_value("interval_ms");
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < kMinIntervalMs || n > kMaxIntervalMs) {
      const ApiError e = invalid_request("interval_ms", "interval_ms must be an integer from 200 to 10000, got '" + v + "'");
      res.status = e.http_status;
      res.set_content(dump_json(e.body()), "application/json");
      return;
    }
    interval_ms = static_cast<int>(n);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto next = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  res.set_chunked_content_provider(
      "text/event-stream", [this, interval_ms, next](size_t, httplib::DataSink& sink) {
        // Wait for the next tick in small steps, so a draining server ends the stream soon.
        while (std::chrono::steady_clock::now() < *next) {
          if (draining_.load()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (draining_.load()) {
          sink.done();
          return true;
        }
        *next += std::chrono::milliseconds(interval_ms);
        const std::string event = "data: " + stats_.snapshot_text(model_json()) + "\n\n";
        return sink.write(event.data(), event.size());
      });
}

}  // namespace sluice::server
