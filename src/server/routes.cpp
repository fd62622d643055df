// HttpServer's routes in one table: route() binds each row to its handler,
// request metrics take their endpoint label from it, and the handlers too small
// for a file of their own live here. Adding an endpoint: docs/ARCHITECTURE.md,
// "Recipe: adding an endpoint".
#include <regex>

#include <httplib.h>

#include "server/http_server.h"

namespace sluice::server {

std::span<const HttpServer::Route> HttpServer::routes() {
  static const Route kRoutes[] = {
      {"GET", "/", "/", "other", "the live page (chat, placement, experts, KV; src/server/web/)",
       &HttpServer::handle_page},
      {"GET", "/health", "/health", "other",
       "200 {\"status\":\"ok\"} once the engine is set; 503 while loading or draining", &HttpServer::handle_health},
      {"GET", "/metrics", "/metrics", "other", "Prometheus text: the whole metric registry", &HttpServer::handle_metrics},
      {"GET", "/stats", "/stats", "other", "the registry as JSON, with rates (stats_feed.h; the API key when one is set)",
       &HttpServer::handle_stats},
      {"GET", "/stats/stream", "/stats/stream", "other", "/stats as Server-Sent Events every interval_ms",
       &HttpServer::handle_stats_stream},
      {"GET", "/v1/models", "/v1/models", "models", "the base model, then each LoRA adapter", &HttpServer::handle_models},
      {"GET", "/v1/models/{id}", R"(/v1/models/(.+))", "models",
       "one of them (a request's \"model\" picks one; \"\" or the base: none)", &HttpServer::handle_models},
      {"POST", "/v1/completions", "/v1/completions", "completions", "text completion (stream: true -> Server-Sent Events)",
       &HttpServer::handle_completions},
      {"POST", "/v1/chat/completions", "/v1/chat/completions", "chat.completions",
       "chat completion through the chat template, tool calls included (stream: true -> Server-Sent Events)",
       &HttpServer::handle_chat},
  };
  return kRoutes;
}

std::string HttpServer::route_label(const std::string& path) {
  static const std::vector<std::regex> patterns = [] {
    std::vector<std::regex> v;
    for (const Route& r : routes()) v.emplace_back(r.pattern);
    return v;
  }();
  for (size_t i = 0; i < patterns.size(); ++i)
    if (std::regex_match(path, patterns[i])) return routes()[i].label;
  return "other";
}

void HttpServer::handle_health(const httplib::Request&, httplib::Response& res) {
  if (draining_.load()) {
    res.status = 503;
    res.set_content(R"({"status":"draining"})", "application/json");
  } else if (!ready_.load(std::memory_order_acquire)) {
    res.status = 503;
    res.set_content(R"({"status":"loading"})", "application/json");
  } else {
    res.set_content(R"({"status":"ok"})", "application/json");
  }
}

void HttpServer::handle_metrics(const httplib::Request&, httplib::Response& res) {
  res.set_content(registry_.render_prometheus(), "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::handle_completions(const httplib::Request& req, httplib::Response& res) {
  handle_generation(static_cast<int>(Endpoint::kCompletions), req, res);
}

void HttpServer::handle_chat(const httplib::Request& req, httplib::Response& res) {
  handle_generation(static_cast<int>(Endpoint::kChat), req, res);
}

}  // namespace sluice::server
