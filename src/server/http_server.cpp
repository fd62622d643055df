#include "server/http_server.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <variant>

#include <fmt/format.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "format/model_file.h"
#include "server/generation_request.h"
#include "server/generation_response.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_stream.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";

ApiError unavailable(std::string message) {
  return api_error(503, "server_error", "service_unavailable", std::move(message));
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 429 || e.http_status == 503) res.set_header("Retry-After", "1");
  if (e.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump_json(e.body()), kJson);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// Equal-time comparison, so the key cannot be guessed byte by byte from timings.
bool same_secret(const std::string& given, const std::string& key) {
  if (given.size() != key.size() || key.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  return diff == 0;
}

}  // namespace

HttpServer::HttpServer(ServerConfig config, MetricRegistry& metrics)
    : config_(std::move(config)), metrics_(metrics), registry_(metrics), stats_(metrics), http_(std::make_unique<httplib::Server>()) {
  const size_t threads = static_cast<size_t>(std::max(4, config_.http_threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(config_.max_body_bytes);
  http_->set_read_timeout(30);
  http_->set_write_timeout(10);
  http_->set_keep_alive_timeout(5);
  http_->set_keep_alive_max_count(1000);
  route();
}

HttpServer::~HttpServer() { shutdown(0); }

Status HttpServer::bind() {
  if (config_.port == 0) {
    port_ = http_->bind_to_any_port(config_.host);
    if (port_ <= 0) return io_error("cannot bind {} on any port", config_.host);
  } else {
    if (!http_->bind_to_port(config_.host, config_.port))
      return io_error("cannot bind {}:{} (in use, or not an address of this host)", config_.host, config_.port);
    port_ = config_.port;
  }
  return Status();
}

void HttpServer::start() {
  listener_ = std::thread([this] {
    http_->listen_after_bind();
    listen_returned_.store(true);
  });
}

Status HttpServer::set_engine(std::shared_ptr<Engine> engine, std::optional<ChatTemplate> chat_template) {
  return set_service(std::make_shared<EngineService>(std::move(engine)), std::move(chat_template));
}

Status HttpServer::set_service(std::shared_ptr<GenerationService> service, std::optional<ChatTemplate> chat_template) {
  if (config_.tool_call_format == "auto") {
    tool_format_ = chat_template ? detect_tool_call_format(chat_template->source()) : ToolCallFormat::kNone;
  } else {
    auto f = parse_tool_call_format(config_.tool_call_format);
    if (!f.ok()) return f.status();
    tool_format_ = *f;
  }
  adapters_ = service->lora_names();
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const std::string base = config_.served_model_name.empty() ? service->model_name() : config_.served_model_name;
    const bool taken = adapters_[i] == base || std::find(adapters_.begin(), adapters_.begin() + static_cast<long>(i),
                                                         adapters_[i]) != adapters_.begin() + static_cast<long>(i);
    if (adapters_[i].empty() || taken) {
      return invalid_argument("adapter id '{}' is empty or taken (the base model's or another adapter's): clients "
                              "pick an adapter by its file's stem, which must be unique",
                              adapters_[i]);
    }
  }
  engine_ = std::move(service);
  chat_ = std::move(chat_template);
  ready_.store(true, std::memory_order_release);
  return Status();
}

bool HttpServer::shutdown(double timeout_s) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (stopped_) return true;
  stopped_ = true;
  draining_.store(true);
  bool clean = true;
  if (ready_.load(std::memory_order_acquire)) clean = engine_->drain(timeout_s);
  // Responses in flight now have their last events; give them time to be written.
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(1000 * std::max(timeout_s, 1.0)));
  while (in_flight_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (in_flight_.load() > 0) clean = false;
  // httplib's stop() does nothing before the listener runs its accept loop,
  // which would then never end: a model that fails to load at once shuts
  // down right after start(). Wait for the loop (or for the listener to give up).
  if (listener_.joinable())
    while (!http_->is_running() && !listen_returned_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
  if (listener_.joinable()) listener_.join();
  return clean;
}

std::string HttpServer::model_id() const {
  return config_.served_model_name.empty() ? engine_->model_name() : config_.served_model_name;
}

ServedModel HttpServer::served(const Tokenizer& tokenizer) const {
  return {.tokenizer = tokenizer, .chat = chat_, .ctx = engine_->ctx_size(), .id = model_id(),
          .tool_format = tool_format_, .adapters = adapters_};
}

bool HttpServer::authorized(const httplib::Request& req) const {
  if (config_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
  return same_secret(h.substr(prefix.size()), config_.api_key);
}

void HttpServer::route() {
  // Every route from the one table (routes.cpp); a method or path outside it is a 404.
  for (const Route& r : routes()) {
    auto handler = [this, handle = r.handle](const httplib::Request& req, httplib::Response& res) {
      (this->*handle)(req, res);
    };
    if (std::string_view(r.method) == "GET") {
      http_->Get(r.pattern, handler);
    } else {
      http_->Post(r.pattern, handler);
    }
  }
  // Errors httplib produces itself (unknown route, body too large, malformed
  // HTTP) get an OpenAI-style body too; responses that already have one pass.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) -> httplib::Server::HandlerResponse {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    if (res.status == 404) {
      e = api_error(404, "invalid_request_error", "unknown_url", fmt::format("unknown endpoint {} {}", req.method, req.path));
    } else if (res.status == 413) {
      e = api_error(413, "invalid_request_error", "request_too_large",
                     fmt::format("the request body exceeds {} bytes", config_.max_body_bytes));
    } else {
      e = api_error(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                     res.status >= 500 ? "server_error" : "bad_request",
                     fmt::format("HTTP {}: the request could not be handled", res.status));
    }
    send_error(res, e);
    metrics_.count_request(route_label(req.path), outcome_for_status(res.status));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    send_error(res, api_error(500, "server_error", "server_error", what));
  });
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res) {
  auto reply = [&](const ApiError& e) {
    send_error(res, e);
    metrics_.count_request("models", outcome_for_status(e.http_status));
  };
  if (draining_.load()) return reply(unavailable("the server is shutting down"));
  if (!ready_.load(std::memory_order_acquire)) return reply(unavailable("the model is still loading"));
  if (!authorized(req))
    return reply(api_error(401, "invalid_request_error", "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)"));
  // The base model, then one entry per LoRA adapter (its parent: the base).
  const int64_t created = unix_now();
  json models = json::array();
  models.push_back({{"id", model_id()}, {"object", "model"}, {"created", created}, {"owned_by", "sluice"},
                    {"max_model_len", engine_->ctx_size()}});
  for (const std::string& a : adapters_) {
    models.push_back({{"id", a}, {"object", "model"}, {"created", created}, {"owned_by", "sluice"},
                      {"max_model_len", engine_->ctx_size()}, {"parent", model_id()}});
  }
  if (req.matches.size() > 1) {
    const std::string id = req.matches[1];
    const auto hit = std::find_if(models.begin(), models.end(), [&](const json& m) { return m["id"] == id; });
    if (hit == models.end()) return reply(std::get<ApiError>(resolve_model(id, model_id(), adapters_)));
    res.set_content(dump_json(*hit), kJson);
  } else {
    res.set_content(dump_json(json{{"object", "list"}, {"data", models}}), kJson);
  }
  metrics_.count_request("models", "ok");
}

void HttpServer::handle_generation(int endpoint_int, const httplib::Request& req, httplib::Response& res) {
  const Endpoint ep = static_cast<Endpoint>(endpoint_int);
  const std::string ep_name = endpoint_name(ep);
  in_flight_.fetch_add(1);
  metrics_.add_in_flight(1);
  // Called exactly once per request: here for plain responses, by the stream's
  // end for streams.
  auto finish = [this, ep_name](const std::string& outcome) {
    metrics_.count_request(ep_name, outcome);
    metrics_.add_in_flight(-1);
    in_flight_.fetch_sub(1);
  };
  auto fail = [&](const ApiError& e) {
    send_error(res, e);
    finish(outcome_for_status(e.http_status));
  };

  if (draining_.load()) return fail(unavailable("the server is shutting down"));
  if (!ready_.load(std::memory_order_acquire)) return fail(unavailable("the model is still loading"));
  if (!authorized(req))
    return fail(api_error(401, "invalid_request_error", "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)"));
  if (req.body.size() > config_.max_body_bytes)
    return fail(api_error(413, "invalid_request_error", "request_too_large",
                          fmt::format("the request body exceeds {} bytes", config_.max_body_bytes)));
  GenerationService& engine = *engine_;
  auto built = build_generation_request(ep, req.body, served(engine.tokenizer()), random_seed());
  if (const ApiError* e = std::get_if<ApiError>(&built)) return fail(*e);
  GenerationPlan& plan = std::get<GenerationPlan>(built);

  auto queue = std::make_shared<EventQueue>();
  const int32_t n = plan.request.n;
  auto id_or = engine.submit(std::move(plan.request), [queue](const TokenEvent& e) { queue->push(e); });
  if (!id_or.ok()) {
    const Status& st = id_or.status();
    if (draining_.load()) return fail(unavailable("the server is shutting down"));
    if (st.code() == StatusCode::kInvalidArgument) return fail(invalid_request("", st.message()));
    if (st.code() == StatusCode::kResourceExhausted)
      return fail(api_error(429, "rate_limit_error", "rate_limit_exceeded",
                            "too many requests are queued; retry later (" + st.message() + ")"));
    return fail(api_error(500, "server_error", "server_error", st.to_string()));
  }
  const RequestId id = *id_or;
  plan.info.id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
  plan.info.created = unix_now();
  GenerationOutput out{.queue = queue,
                       .acc = std::make_shared<ChoiceAccumulator>(engine.tokenizer(), n, plan.info.logprobs, plan.tools,
                                                                  random_seed()),
                       .info = plan.info,
                       .n_prompt = plan.n_prompt,
                       .include_usage = plan.include_usage};
  if (!plan.stream) {
    auto body = collect_response(out);
    if (const ApiError* e = std::get_if<ApiError>(&body)) return fail(*e);
    res.set_content(std::get<std::string>(body), kJson);
    finish("ok");
    return;
  }
  const auto keepalive = std::chrono::milliseconds(static_cast<int64_t>(1000 * config_.stream_keepalive_s));
  stream_response(res, std::move(out), keepalive, [engine = engine_, id] { engine->abort(id); }, finish);
}

StatusOr<std::optional<ChatTemplate>> load_chat_template(const Engine& engine, const std::string& override_path) {
  const Tokenizer& tokenizer = engine.tokenizer();
  const std::string bos = tokenizer.bos_id() >= 0 ? tokenizer.token_text(tokenizer.bos_id()) : "";
  const std::string eos = tokenizer.eos_id() >= 0 ? tokenizer.token_text(tokenizer.eos_id()) : "";
  if (!override_path.empty()) {
    ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::from_file(override_path, bos, eos));
    return std::optional<ChatTemplate>(std::move(t));
  }
  const std::string source = engine.chat_template();
  if (source.empty()) return std::optional<ChatTemplate>();
  auto t = ChatTemplate::create(source, bos, eos);
  if (!t.ok()) return t.status().with_context("the model's tokenizer.chat_template (override it with --chat-template FILE)");
  return std::optional<ChatTemplate>(std::move(t).value());
}

}  // namespace sluice::server
