// sluice serve: the OpenAI-compatible HTTP server (src/server/http_server.h).
//
// The socket is bound first, so /health answers "loading" while the model loads.
// SIGINT/SIGTERM are taken by a dedicated thread (sigwait): the server stops
// accepting work, drains in-flight requests for up to --drain-timeout seconds,
// and the process exits 0.
#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/metrics.h"
#include "cli.h"
#include "model_flags.h"
#include "server/http_server.h"

namespace sluice::cli {
namespace {

struct ServeArgs {
  ModelFlags m;
  server::ServerConfig server;
  EngineConfig engine;  // the engine's own flags (the model's are in m)
  std::string chat_template;
  double kv_budget_mib = 0;
  double swap_budget_mib = 0;
  bool no_prefix_cache = false;
  double drain_timeout_s = 30;
};

// Signal state shared by the sigwait thread and the main thread.
struct Shutdown {
  std::mutex mu;
  std::condition_variable cv;
  int signal = 0;
  bool load_done = false;
};

int serve(ServeArgs a) {
  // Block the stop signals in every thread (threads inherit the mask), so only
  // the sigwait thread below receives them.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  std::optional<int> worker_exit;
  auto parallel = a.m.join(&worker_exit);
  if (!parallel.ok()) return fail(parallel.status());
  if (worker_exit) return *worker_exit;
  a.engine = a.m.engine_config(a.engine);
  a.engine.parallel = *parallel;
  a.engine.kv_budget_bytes = static_cast<uint64_t>(a.kv_budget_mib * 1024 * 1024);
  a.engine.swap_budget_bytes = static_cast<uint64_t>(a.swap_budget_mib * 1024 * 1024);
  a.engine.prefix_caching = !a.no_prefix_cache;
  finish_speculative_options(&a.engine);
  if (a.server.http_threads <= 0) a.server.http_threads = static_cast<int>(std::max<int64_t>(16, 2 * a.engine.max_seqs));

  if (a.server.tool_call_format != "auto") {
    if (auto f = server::parse_tool_call_format(a.server.tool_call_format); !f.ok()) return fail(f.status());
  }
  server::HttpServer http(a.server, global_metrics());
  if (Status st = http.bind(); !st.ok()) return fail(st);
  http.start();
  fmt::print(stderr, "[sluice] listening on http://{}:{} (loading {})\n", a.server.host, http.port(), a.m.model);

  Shutdown sd;
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&stop_set, &sig);
    std::lock_guard<std::mutex> lock(sd.mu);
    sd.signal = sig;
    sd.cv.notify_all();
  });

  // Load in the background so a signal during a long load still stops the server.
  StatusOr<std::unique_ptr<Engine>> engine_or = internal_error("not loaded");
  std::optional<server::ChatTemplate> chat;
  Status load_status;
  std::thread loader([&] {
    engine_or = Engine::create(a.engine);
    if (engine_or.ok()) {
      const std::string placement = (*engine_or)->placement_report();
      if (!placement.empty()) fmt::print(stderr, "{}", placement);
      auto t = server::load_chat_template(**engine_or, a.chat_template);
      if (t.ok()) chat = std::move(t).value();
      else load_status = t.status();
    } else {
      load_status = engine_or.status();
    }
    std::lock_guard<std::mutex> lock(sd.mu);
    sd.load_done = true;
    sd.cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(sd.mu);
    sd.cv.wait(lock, [&] { return sd.load_done || sd.signal != 0; });
  }
  // The loader cannot be interrupted; on a signal during load, wait for it.
  loader.join();
  auto stop_signal_thread = [&] {
    bool pending;
    {
      std::lock_guard<std::mutex> lock(sd.mu);
      pending = sd.signal == 0;
    }
    if (pending) pthread_kill(signal_thread.native_handle(), SIGTERM);
    signal_thread.join();
  };
  if (!load_status.ok()) {
    http.shutdown(0);
    stop_signal_thread();
    return fail(load_status);
  }
  std::shared_ptr<Engine> engine(std::move(engine_or).value());
  if (const std::string spec = engine->speculative_summary(); !spec.empty()) fmt::print(stderr, "[sluice] {}\n", spec);
  const bool has_chat = chat.has_value();
  if (!chat) fmt::print(stderr, "[sluice] the model has no chat template: /v1/chat/completions needs --chat-template FILE\n");
  if (Status st = http.set_engine(engine, std::move(chat)); !st.ok()) {
    http.shutdown(0);
    stop_signal_thread();
    return fail(st);
  }
  const std::string template_origin =
      !has_chat ? "none" : a.chat_template.empty() ? "the model's tokenizer.chat_template" : a.chat_template;
  fmt::print(stderr, "[sluice] ready: model '{}' | ctx {} | chat template: {} | tool calls: {} | {}\n",
             a.server.served_model_name.empty() ? engine->model_name() : a.server.served_model_name, engine->ctx_size(),
             template_origin, server::tool_call_format_name(http.tool_call_format()), engine->summary());
  if (const auto ids = engine->lora_names(); !ids.empty())
    fmt::print(stderr, "[sluice] adapters (a request's \"model\" picks one): {}\n", fmt::join(ids, ", "));

  int sig;
  {
    std::unique_lock<std::mutex> lock(sd.mu);
    sd.cv.wait(lock, [&] { return sd.signal != 0; });
    sig = sd.signal;
  }
  fmt::print(stderr, "[sluice] {}: draining (up to {:.0f} s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", a.drain_timeout_s);
  const bool clean = http.shutdown(a.drain_timeout_s);
  signal_thread.join();
  fmt::print(stderr, "[sluice] stopped{}\n", clean ? "" : " (some requests were cut off at the drain timeout)");
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->server.http_threads = 0;  // chosen from --max-seqs after parsing
  CLI::App* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, SSE streaming, /metrics)");
  a->m.add_to(c, {.threads = "compute threads (default: all cores)",
                  .ctx = "positions per sequence (default: min(trained, 4096))",
                  .lora = "each is a model in /v1/models (id: the file's stem) that a request picks by its \"model\""});
  c->add_option("--host", a->server.host, "address to bind (loopback by default)")->capture_default_str();
  c->add_option("--port", a->server.port, "port; 0 = any free port (printed)")->capture_default_str();
  c->add_option("--api-key", a->server.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  c->add_option("--served-model-name", a->server.served_model_name, "model id clients must send (default: the model's name)");
  c->add_option("--chat-template", a->chat_template, "Jinja chat template file (overrides the model's)");
  c->add_option("--tool-call-format", a->server.tool_call_format,
                "how the model writes tool calls: auto (from the chat template), none, llama3, hermes, mistral, deepseek")
      ->capture_default_str();
  c->add_option("--max-body-bytes", a->server.max_body_bytes, "larger request bodies get 413")->capture_default_str();
  c->add_option("--http-threads", a->server.http_threads, "connections served at once (default: max(16, 2 x max-seqs))");
  c->add_option("--stream-keepalive", a->server.stream_keepalive_s, "seconds without tokens before a keep-alive comment")
      ->capture_default_str();
  c->add_option("--drain-timeout", a->drain_timeout_s, "seconds SIGTERM/SIGINT waits for in-flight requests")
      ->capture_default_str();
  // Engine flags.
  c->add_option("--max-batch-tokens", a->engine.max_batch_tokens, "tokens per engine step")->capture_default_str();
  c->add_option("--max-seqs", a->engine.max_seqs, "sequences running at once")->capture_default_str();
  c->add_option("--max-queued", a->engine.max_queued, "waiting requests before 429")->capture_default_str();
  c->add_option("--kv-budget-mib", a->kv_budget_mib, "KV pool size in MiB (default: engine's choice)");
  c->add_option("--kv-dtype", a->engine.kv_dtype, "auto, f32, f16, q8_0")->capture_default_str();
  c->add_option("--kv-block-size", a->engine.kv_block_size, "positions per KV block")->capture_default_str();
  c->add_flag("--no-prefix-cache", a->no_prefix_cache, "disable prefix caching");
  add_speculative_options(c, &a->engine);
  c->add_flag("--fluid-split", a->engine.fluid_split,
              "with --mem-budget, or --gpu-budget on cuda: resident layers and the KV pool share the budget "
              "(layers stream instead of preempting, and come back when load drops)");
  c->add_flag("--preempt-swap", a->engine.preempt_swap, "preempt by swapping KV to host memory (else recompute)");
  c->add_option("--swap-budget-mib", a->swap_budget_mib, "host swap pool in MiB (default: the KV budget)");
  return [a] { return serve(*a); };
}

}  // namespace sluice::cli
