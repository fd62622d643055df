// sluice run: generate a continuation of a prompt.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli.h"
#include "model_flags.h"
#include "model/generate.h"
#include "sample/sampler.h"
#include "tokenizer/stream_decoder.h"

namespace sluice::cli {
namespace {

struct RunArgs {
  ModelFlags m;
  std::string prompt;
  int32_t n_predict = 128;
  bool json = false;
  bool special = false;
  bool ignore_eos = false;
  int64_t seed = -1;
  SamplingParams sampling;
  EngineConfig spec;  // speculative decoding flags only
};

// With speculative decoding: one request through the engine, which drafts and
// verifies (the plain path below has no proposer).
int run_speculative(const RunArgs& a, SamplingParams sp, std::shared_ptr<dist::Session> parallel) {
  EngineConfig cfg = a.m.engine_config(a.spec);
  cfg.parallel = std::move(parallel);
  cfg.max_seqs = 1;
  const double t0 = now_seconds();
  auto engine_or = Engine::create(cfg);
  if (!engine_or.ok()) return fail(engine_or.status());
  Engine& engine = **engine_or;
  const double load_s = now_seconds() - t0;
  if (const std::string placement = engine.placement_report(); !placement.empty()) fmt::print(stderr, "{}", placement);
  fmt::print(stderr, "[sluice] {}\n", engine.speculative_summary());
  const Tokenizer& tok = engine.tokenizer();
  std::vector<int32_t> prompt = tok.encode(a.prompt, /*add_special=*/true, a.special);
  if (prompt.empty()) return fail(invalid_argument("the prompt is empty and the model adds no BOS token"));
  if (a.n_predict < 1) return fail(invalid_argument("-n must be >= 1 with speculative decoding"));
  if (static_cast<int64_t>(prompt.size()) + a.n_predict > engine.ctx_size()) {
    return fail(invalid_argument("prompt ({} tokens) + -n {} exceeds the context of {} (raise -c)", prompt.size(),
                                 a.n_predict, engine.ctx_size()));
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<int32_t> tokens;
  std::string text, error;
  FinishReason reason = FinishReason::kNone;
  RequestTimings timings;
  Request req{.prompt = prompt, .max_tokens = a.n_predict, .sampling = sp, .ignore_eos = a.ignore_eos};
  for (size_t i = 0; i < a.m.loras.size(); ++i) req.loras.push_back(static_cast<int32_t>(i));  // all of them
  auto id = engine.submit(req, [&](const TokenEvent& ev) {
    if (ev.token >= 0) tokens.push_back(ev.token);
    text += ev.text;
    if (!a.json && !ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    if (ev.finished) reason = ev.finish_reason, error = ev.error;
    if (ev.timings) {
      std::lock_guard<std::mutex> lock(mu);
      timings = *ev.timings;
      done = true;
      cv.notify_all();
    }
  });
  if (!id.ok()) return fail(id.status());
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (reason == FinishReason::kError) return fail(internal_error("generation failed: {}", error));
  if (a.json) {
    nlohmann::json j;
    j["tokens"] = tokens;
    j["text"] = text;
    j["finish_reason"] = finish_reason_name(reason);
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    std::fputc('\n', stdout);
  }
  const EngineStats st = engine.stats();
  const double decode_s = timings.e2e_s - timings.ttft_s;
  fmt::print(stderr,
             "\n[sluice] model {} | load {:.2f} s | threads {} | seed {}\n"
             "[sluice] prompt {} tokens, TTFT {:.1f} ms | generated {} tokens, {:.1f} tok/s | finish: {}\n"
             "[sluice] {}\n",
             a.m.model, load_s, a.m.n_threads, sp.seed, prompt.size(), timings.ttft_s * 1e3, tokens.size(),
             tokens.size() > 1 ? static_cast<double>(tokens.size() - 1) / std::max(decode_s, 1e-9) : 0.0,
             finish_reason_name(reason), speculative_line(st).empty() ? "speculative: nothing drafted" : speculative_line(st));
  return 0;
}

int run(RunArgs a) {
  std::optional<int> worker_exit;
  auto parallel = a.m.join(&worker_exit);
  if (!parallel.ok()) return fail(parallel.status());
  if (worker_exit) return *worker_exit;
  finish_speculative_options(&a.spec);
  if (a.spec.speculative != "off") {
    SamplingParams sp = a.sampling;
    sp.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed)
                          : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    if (Status st = validate_sampling_params(sp); !st.ok()) return fail(st);
    return run_speculative(a, sp, *parallel);
  }
  // -c plans the model for that context (LongRoPE chooses its factors by it); without it, the trained one.
  auto lm_or = load_model_verbose(a.m.model, a.m.load_options(), /*quiet=*/false, parallel->get());
  if (!lm_or.ok()) return fail(lm_or.status());
  LoadedModel& lm = *lm_or;
  const Tokenizer& tok = *lm.tokenizer;
  const ModelHparams& hp = lm.model->hparams();

  std::vector<int32_t> prompt = tok.encode(a.prompt, /*add_special=*/true, a.special);
  if (prompt.empty()) return fail(invalid_argument("the prompt is empty and the model adds no BOS token"));
  if (a.n_predict < 0) return fail(invalid_argument("-n must be >= 0"));
  int64_t n_ctx = a.m.ctx_size > 0 ? a.m.ctx_size : static_cast<int64_t>(prompt.size()) + a.n_predict;
  if (a.m.ctx_size <= 0 && n_ctx > hp.n_ctx_train) n_ctx = hp.n_ctx_train;
  if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
    return fail(invalid_argument("prompt has {} tokens but the context is {} (raise -c)", prompt.size(), n_ctx));
  }
  SamplingParams sp = a.sampling;
  sp.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed)
                        : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (Status st = validate_sampling_params(sp); !st.ok()) return fail(st);
  Sampler sampler(sp, static_cast<int32_t>(hp.n_vocab));
  KvCache kv = lm.model->make_kv_cache(n_ctx);

  // The engine's rule (StopCondition): end-of-generation ids stop unless
  // --ignore-eos; a stop token ends the output and adds no text.
  GenerateParams gp{.stop = StopCondition::for_request({}, tok.eog_ids(), a.ignore_eos, a.n_predict),
                    .loras = lm.model->adapters().all()};
  StreamDecoder dec(tok);
  auto on_token = [&](int32_t id) {
    if (!a.json && !gp.stop.is_stop_token(id)) {
      const std::string piece = dec.push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto res = generate(*lm.model, kv, prompt, sampler, gp, on_token);
  if (!res.ok()) return fail(res.status());
  const GenerateResult& r = *res;
  if (a.json) {
    std::vector<int32_t> text_ids;
    for (int32_t id : r.tokens)
      if (!gp.stop.is_stop_token(id)) text_ids.push_back(id);
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["text"] = tok.decode(text_ids);
    j["finish_reason"] = finish_reason_name(r.finish_reason);
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    const std::string tail = dec.finish();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
  }
  const double n_gen = static_cast<double>(r.tokens.size());
  fmt::print(stderr,
             "\n[sluice] model {} | load {:.2f} s | threads {} | seed {}\n"
             "[sluice] prompt {} tokens, TTFT {:.1f} ms ({:.1f} tok/s) | generated {} tokens, {:.1f} tok/s | finish: {}\n",
             a.m.model, lm.load_seconds, lm.model->n_threads(), sp.seed, r.n_prompt, r.prompt_seconds * 1e3,
             r.n_prompt / std::max(r.prompt_seconds, 1e-9), r.tokens.size(),
             n_gen > 1 ? (n_gen - 1) / std::max(r.decode_seconds, 1e-9) : 0.0, finish_reason_name(r.finish_reason));
  if (lm.stream) {
    const weights::ArbiterStats io = lm.stream->store().arbiter_stats();
    fmt::print(stderr, "[sluice] {}\n[sluice] disk: {:.2f} GB read from the model file at {:.2f} GB/s while reads were in flight\n",
               lm.stream->store().counters().summary(), static_cast<double>(io.total_bytes()) / 1e9, io.in_flight_gbps());
    if (lm.stream->store().streams_experts()) {
      const weights::ExpertStatsSnapshot ex = lm.stream->store().expert_stats();
      fmt::print(stderr, "[sluice] {}\n[sluice] {}", ex.per_token(lm.stream->store().counters()), ex.table());
    }
  }
  if (!lm.model->repack_summary().empty()) fmt::print(stderr, "[sluice] weights: {}\n", lm.model->repack_summary());
  if (lm.model->adapters().size() > 0) fmt::print(stderr, "[sluice] {}\n", lm.model->adapters().summary());
  if (const std::string copies = lm.model->backend().copy_summary(); !copies.empty())
    fmt::print(stderr, "[sluice] {}\n", copies);
  if (const LongRopeFactors f = lm.model->longrope_factors(); f != LongRopeFactors::kNone) {
    fmt::print(stderr, "[sluice] LongRoPE: {} factors (context {} {} the original {}; --ctx-size chooses)\n",
               longrope_factors_name(f), lm.model->n_ctx_max(), f == LongRopeFactors::kLong ? "past" : "within",
               lm.model->hparams().rope_orig_ctx);
  }
  return 0;
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "generate text from a prompt (continuation to stdout, summary to stderr)");
  a->m.add_to(c, {.ctx = "context size (default: prompt + n, capped at the trained context)"});
  c->add_option("-p,--prompt", a->prompt, "prompt text (BOS is added as the model says)");
  c->add_option("-n,--n-predict", a->n_predict, "tokens to generate")->capture_default_str();
  c->add_option("--temp", a->sampling.temperature, "temperature; 0 = greedy")->capture_default_str();
  c->add_option("--top-k", a->sampling.top_k, "top-k; 0 = off")->capture_default_str();
  c->add_option("--top-p", a->sampling.top_p, "top-p; 1 = off")->capture_default_str();
  c->add_option("--min-p", a->sampling.min_p, "min-p; 0 = off")->capture_default_str();
  c->add_option("--repeat-penalty", a->sampling.repeat_penalty, "repetition penalty; 1 = off")->capture_default_str();
  c->add_option("--repeat-last-n", a->sampling.repeat_last_n, "penalty window; -1 = all")->capture_default_str();
  c->add_option("--frequency-penalty", a->sampling.frequency_penalty, "OpenAI-style frequency penalty");
  c->add_option("--presence-penalty", a->sampling.presence_penalty, "OpenAI-style presence penalty");
  c->add_option("-s,--seed", a->seed, "RNG seed (default: random, printed in the summary)");
  c->add_flag("--json", a->json, "print one JSON object {\"tokens\": [...], \"text\": ...} instead of streaming");
  c->add_flag("--special", a->special, "parse special-token text (e.g. <|im_start|>) in the prompt");
  c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  add_speculative_options(c, &a->spec);
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
