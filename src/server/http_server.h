// HttpServer: the OpenAI-compatible HTTP front of an Engine (cpp-httplib).
//
// Its routes are one table, HttpServer::routes() (routes.cpp): GET /, /health,
// /metrics, /stats, /stats/stream, /v1/models, /v1/models/{id}; POST
// /v1/completions, /v1/chat/completions (stream: true -> Server-Sent Events).
//
// Lifecycle: bind() -> start() (serves /health as "loading" at once) ->
// set_engine() (ready) -> shutdown() (new requests get 503, in-flight ones
// finish within the timeout, the listener stops). Every error is an OpenAI-style
// {"error": {...}} body with the matching status: 400 bad JSON/types/values or a
// prompt beyond the context, 401 API key, 404 unknown model or route, 413 body
// too large, 429 engine queue full, 503 loading or draining.
//
// A streaming client that disconnects is noticed on the next write (tokens, or
// a keep-alive comment while it waits), and its request is aborted so its KV
// blocks return to the pool. Each HTTP connection is served by a worker thread
// from a pool of `http_threads`. All public methods are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "server/chat_template.h"
#include "server/generation_request.h"
#include "server/generation_service.h"
#include "server/server_metrics.h"
#include "server/stats_feed.h"
#include "server/tool_calls.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace sluice::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see HttpServer::port())
  std::string api_key;              // "": no authentication
  std::string served_model_name;    // "": the engine's model_name()
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int http_threads = 128;           // connections served at once
  double stream_keepalive_s = 2.0;  // a ": keep-alive" comment after this long without tokens
  // How model output writes tool calls: "auto" (from the chat template's
  // source, see detect_tool_call_format), or a format name (tool_calls.h).
  std::string tool_call_format = "auto";
};

class HttpServer {
 public:
  HttpServer(ServerConfig config, MetricRegistry& metrics);
  ~HttpServer();  // shutdown(0) if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket. kIoError if the address cannot be bound.
  Status bind();
  // The bound port (after bind()).
  int port() const { return port_; }
  // Serves in a background thread.
  void start();
  // Hands over the loaded engine and, if the model has one, its chat template.
  // kInvalidArgument if config.tool_call_format names no format (the server
  // stays not ready).
  Status set_engine(std::shared_ptr<Engine> engine, std::optional<ChatTemplate> chat_template);
  // The same for any GenerationService (set_engine wraps the Engine in one).
  Status set_service(std::shared_ptr<GenerationService> service, std::optional<ChatTemplate> chat_template);
  // The tool-call format chat outputs are parsed with (after set_engine).
  ToolCallFormat tool_call_format() const { return tool_format_; }
  // Refuses new work, drains the engine (timeout_s), waits for responses in
  // flight to be written, stops the listener. Returns true if nothing had to be
  // cut off. Idempotent.
  bool shutdown(double timeout_s);

  // One HTTP route. route() binds every row of routes() to its handler; a
  // method and path outside the table get a 404.
  struct Route {
    const char* method;       // "GET" or "POST"
    const char* path;         // as documented: "/v1/models/{id}"
    const char* pattern;      // as bound: httplib's pattern, a regex ("/v1/models/(.+)")
    const char* label;        // the endpoint label of its request metrics ("other": counted only on errors)
    const char* description;  // what it answers
    void (HttpServer::*handle)(const httplib::Request&, httplib::Response&);
  };
  // Every route, in the order they are bound (routes.cpp).
  static std::span<const Route> routes();
  // The label of the route whose pattern matches `path`, else "other".
  static std::string route_label(const std::string& path);

 private:
  struct Ctx;  // one generation request while it is handled
  void route();
  void handle_health(const httplib::Request& req, httplib::Response& res);
  void handle_metrics(const httplib::Request& req, httplib::Response& res);
  void handle_completions(const httplib::Request& req, httplib::Response& res);  // handle_generation, kCompletions
  void handle_chat(const httplib::Request& req, httplib::Response& res);  // handle_generation, kChat
  void handle_generation(int endpoint, const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  // The live view (stats_routes.cpp).
  void handle_page(const httplib::Request& req, httplib::Response& res);
  void handle_stats(const httplib::Request& req, httplib::Response& res);
  void handle_stats_stream(const httplib::Request& req, httplib::Response& res);
  // The service's describe_json(), once it is ready ("" before).
  std::string model_json();
  bool authorized(const httplib::Request& req) const;
  std::string model_id() const;
  // What requests are checked against (the base's id and the adapters').
  ServedModel served(const Tokenizer& tokenizer) const;

  ServerConfig config_;
  ServerMetrics metrics_;
  MetricRegistry& registry_;
  StatsFeed stats_;
  std::mutex model_json_mu_;
  std::string model_json_;
  uint64_t model_json_version_ = 0;  // GenerationService::placement_version() model_json_ was made at
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  std::atomic<bool> listen_returned_{false};  // the listener's listen_after_bind() is over
  int port_ = 0;
  std::shared_ptr<GenerationService> engine_;
  std::optional<ChatTemplate> chat_;
  std::vector<std::string> adapters_;  // LoRA adapters' ids, the index a request's model picks
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> next_id_{1};
  std::mutex shutdown_mu_;
  bool stopped_ = false;
};

// Loads the chat template for a model: the file when `override_path` is set,
// else the model's `tokenizer.chat_template`; nullopt if it has none.
StatusOr<std::optional<ChatTemplate>> load_chat_template(const Engine& engine, const std::string& override_path);

}  // namespace sluice::server
