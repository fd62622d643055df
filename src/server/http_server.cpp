#include "server/http_server.h"

#include <chrono>
#include <random>
#include <variant>

#include <fmt/format.h>
#include <httplib.h>

#include "format/model_file.h"
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

ApiError make_error(int status, std::string type, std::string code, std::string message, std::string param = "") {
  return ApiError{.http_status = status,
                  .type = std::move(type),
                  .code = std::move(code),
                  .param = std::move(param),
                  .message = std::move(message)};
}

ApiError unavailable(std::string message) {
  return make_error(503, "server_error", "service_unavailable", std::move(message));
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

std::string endpoint_label(const std::string& path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat.completions";
  if (path.rfind("/v1/models", 0) == 0) return "models";
  return "other";
}

}  // namespace

HttpServer::HttpServer(ServerConfig config, MetricRegistry& metrics)
    : config_(std::move(config)), metrics_(metrics), registry_(metrics), http_(std::make_unique<httplib::Server>()) {
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
  listener_ = std::thread([this] { http_->listen_after_bind(); });
}

void HttpServer::set_engine(std::shared_ptr<Engine> engine, std::optional<ChatTemplate> chat_template) {
  engine_ = std::move(engine);
  chat_ = std::move(chat_template);
  ready_.store(true, std::memory_order_release);
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
  http_->stop();
  if (listener_.joinable()) listener_.join();
  return clean;
}

std::string HttpServer::model_id() const {
  return config_.served_model_name.empty() ? engine_->model_name() : config_.served_model_name;
}

bool HttpServer::authorized(const httplib::Request& req) const {
  if (config_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
  return same_secret(h.substr(prefix.size()), config_.api_key);
}

void HttpServer::route() {
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining_.load()) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", kJson);
    } else if (!ready_.load(std::memory_order_acquire)) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", kJson);
    } else {
      res.set_content(R"({"status":"ok"})", kJson);
    }
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_.render_prometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  http_->Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) { handle_models(req, res); });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(static_cast<int>(Endpoint::kCompletions), req, res);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(static_cast<int>(Endpoint::kChat), req, res);
  });
  // Errors httplib produces itself (unknown route, body too large, malformed
  // HTTP) get an OpenAI-style body too; responses that already have one pass.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) -> httplib::Server::HandlerResponse {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    if (res.status == 404) {
      e = make_error(404, "invalid_request_error", "unknown_url", fmt::format("unknown endpoint {} {}", req.method, req.path));
    } else if (res.status == 413) {
      e = make_error(413, "invalid_request_error", "request_too_large",
                     fmt::format("the request body exceeds {} bytes", config_.max_body_bytes));
    } else {
      e = make_error(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                     res.status >= 500 ? "server_error" : "bad_request",
                     fmt::format("HTTP {}: the request could not be handled", res.status));
    }
    send_error(res, e);
    metrics_.count_request(endpoint_label(req.path), outcome_for_status(res.status));
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
    send_error(res, make_error(500, "server_error", "server_error", what));
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
    return reply(make_error(401, "invalid_request_error", "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)"));
  const json model = {{"id", model_id()}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "sluice"},
                      {"max_model_len", engine_->ctx_size()}};
  if (req.matches.size() > 1) {
    const std::string id = req.matches[1];
    if (id != model_id())
      return reply(make_error(404, "invalid_request_error", "model_not_found",
                              fmt::format("the model '{}' does not exist; this server serves '{}'", id, model_id()), "model"));
    res.set_content(dump_json(model), kJson);
  } else {
    res.set_content(dump_json(json{{"object", "list"}, {"data", json::array({model})}}), kJson);
  }
  metrics_.count_request("models", "ok");
}

void HttpServer::handle_generation(int endpoint_int, const httplib::Request& req, httplib::Response& res) {
  const Endpoint ep = static_cast<Endpoint>(endpoint_int);
  const std::string ep_name = endpoint_name(ep);
  in_flight_.fetch_add(1);
  metrics_.add_in_flight(1);
  // Called exactly once per request: here for plain responses, by the stream's
  // releaser for streams.
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
    return fail(make_error(401, "invalid_request_error", "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)"));
  if (req.body.size() > config_.max_body_bytes)
    return fail(make_error(413, "invalid_request_error", "request_too_large",
                           fmt::format("the request body exceeds {} bytes", config_.max_body_bytes)));
  auto parsed = parse_generation_request(ep, req.body);
  if (const ApiError* e = std::get_if<ApiError>(&parsed)) return fail(*e);
  GenerationRequest& g = std::get<GenerationRequest>(parsed);
  if (g.model.empty()) return fail(invalid_request("model", "'model' is required", "missing_required_parameter"));
  if (g.model != model_id())
    return fail(make_error(404, "invalid_request_error", "model_not_found",
                           fmt::format("the model '{}' does not exist; this server serves '{}'", g.model, model_id()), "model"));

  Engine& engine = *engine_;
  const Tokenizer& tok = engine.tokenizer();
  std::vector<int32_t> prompt;
  if (ep == Endpoint::kChat) {
    if (!chat_)
      return fail(invalid_request("messages", "this model has no chat template; start the server with --chat-template FILE",
                                  "chat_template_missing"));
    auto text = chat_->apply(g.messages, /*add_generation_prompt=*/true);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kUnimplemented)
        return fail(make_error(500, "server_error", "chat_template_unsupported", text.status().message()));
      return fail(invalid_request("messages", text.status().message()));
    }
    prompt = tokenize_chat_prompt(tok, *text);
  } else if (g.prompt_is_ids) {
    for (int32_t id : g.prompt_ids)
      if (id >= tok.n_vocab()) return fail(invalid_request("prompt", fmt::format("token id {} is outside the vocabulary of {}", id, tok.n_vocab())));
    prompt = g.prompt_ids;
  } else {
    prompt = tok.encode(g.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  if (prompt.empty()) return fail(invalid_request("prompt", "the prompt is empty and the model adds no BOS token"));
  const int64_t ctx = engine.ctx_size();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= ctx)
    return fail(invalid_request(ep == Endpoint::kChat ? "messages" : "prompt",
                                fmt::format("this model's maximum context length is {} tokens, but the prompt has {} tokens",
                                            ctx, n_prompt),
                                "context_length_exceeded"));
  const int64_t room = ctx - n_prompt;
  const int64_t max_tokens = g.max_tokens.value_or(ep == Endpoint::kChat ? room : std::min<int64_t>(16, room));
  if (max_tokens > room)
    return fail(invalid_request("max_tokens",
                                fmt::format("this model's maximum context length is {} tokens; you requested {} tokens "
                                            "({} in the prompt, {} for the completion)",
                                            ctx, n_prompt + max_tokens, n_prompt, max_tokens),
                                "context_length_exceeded"));

  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = static_cast<int32_t>(max_tokens);
  r.n = g.n;
  r.sampling = SamplingParams{.temperature = g.temperature,
                              .top_k = 0,
                              .top_p = g.top_p,
                              .min_p = 0.0f,
                              .repeat_penalty = 1.0f,
                              .repeat_last_n = -1,
                              .frequency_penalty = g.frequency_penalty,
                              .presence_penalty = g.presence_penalty,
                              .seed = g.seed ? static_cast<uint64_t>(*g.seed) : random_seed()};
  r.stop_strings = g.stop;
  r.ignore_eos = g.ignore_eos;
  r.top_logprobs = g.top_logprobs;
  auto queue = std::make_shared<EventQueue>();
  auto id_or = engine.submit(std::move(r), [queue](const TokenEvent& e) { queue->push(e); });
  if (!id_or.ok()) {
    const Status& st = id_or.status();
    if (draining_.load()) return fail(unavailable("the server is shutting down"));
    if (st.code() == StatusCode::kInvalidArgument) return fail(invalid_request("", st.message()));
    if (st.code() == StatusCode::kResourceExhausted)
      return fail(make_error(429, "rate_limit_error", "rate_limit_exceeded",
                             "too many requests are queued; retry later (" + st.message() + ")"));
    return fail(make_error(500, "server_error", "server_error", st.to_string()));
  }
  const RequestId id = *id_or;

  ResponseInfo info{.endpoint = ep,
                    .id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1)),
                    .created = unix_now(),
                    .model = model_id(),
                    .logprobs = g.top_logprobs >= 0,
                    .token_ids = g.return_token_ids};
  auto acc = std::make_shared<ChoiceAccumulator>(tok, g.n, info.logprobs, g.ignore_eos);

  if (!g.stream) {
    while (!acc->all_finished())
      for (const TokenEvent& e : queue->take(std::chrono::milliseconds(500))) acc->apply(e);
    if (acc->error()) return fail(make_error(500, "server_error", "generation_failed", *acc->error()));
    res.set_content(dump_json(response_json(info, acc->totals(), usage_json(n_prompt, acc->completion_tokens()))), kJson);
    finish("ok");
    return;
  }

  struct StreamState {
    std::vector<bool> sent_first;
    bool completed = false;
    Clock::time_point last_write = Clock::now();
  };
  auto st = std::make_shared<StreamState>();
  st->sent_first.assign(static_cast<size_t>(g.n), false);
  const bool include_usage = g.include_usage;
  const auto keepalive = std::chrono::milliseconds(static_cast<int64_t>(1000 * config_.stream_keepalive_s));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [queue, acc, st, info, include_usage, n_prompt, keepalive](size_t, httplib::DataSink& sink) {
        std::string out;
        for (const TokenEvent& e : queue->take(std::chrono::milliseconds(200))) {
          const ChoiceOutput d = acc->apply(e);
          if (d.finish_reason == "error") {
            out += sse_json(make_error(500, "server_error", "generation_failed", acc->error().value_or("")).body());
            continue;
          }
          const bool has_news = !d.text.empty() || !d.finish_reason.empty() || (info.logprobs && !d.logprobs.empty()) ||
                                (info.token_ids && !d.token_ids.empty());
          if (!has_news || d.index < 0 || d.index >= static_cast<int32_t>(st->sent_first.size())) continue;
          const bool first = !st->sent_first[static_cast<size_t>(d.index)];
          st->sent_first[static_cast<size_t>(d.index)] = true;
          out += sse_json(chunk_json(info, d, first, acc->text_before_last(d.index)));
        }
        const bool finished = acc->all_finished();
        if (finished) {
          if (include_usage) out += sse_json(usage_chunk_json(info, usage_json(n_prompt, acc->completion_tokens())));
          out += kSseDone;
        }
        if (out.empty() && Clock::now() - st->last_write >= keepalive) out = sse_comment("keep-alive");
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;
          st->last_write = Clock::now();
        }
        if (finished) {
          st->completed = true;
          sink.done();
        }
        return true;
      },
      [engine = engine_, id, acc, st, finish](bool success) {
        if (!st->completed) engine->abort(id);
            finish(!st->completed || !success ? "cancelled" : acc->error() ? "error" : "ok");
      });
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
