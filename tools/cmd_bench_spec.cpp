// sluice bench-spec: decode speed with and without speculative decoding, side by
// side in one run, on one prompt.
//
//   engine    one in-process engine on the target with speculation on (--spec
//             lookup, or --draft-model for a draft model kept resident), one
//             sequence at a time; "plain" runs are requests with speculative =
//             false, so both modes share the weights, the weight store (under
//             --mem-budget) and the threads.
//   runs      one warm-up each, then -r repetitions of the same request in both
//             modes, the order alternating (plain first on even repetitions) so
//             drift of the machine's speed hits both alike. Requests ignore EOS,
//             so every run generates exactly -n tokens.
//   figures   decode tok/s = (n - 1) / (finish - first token), median over the
//             repetitions; ratio = spec / plain medians; acceptance, tokens per
//             target pass and drafted tokens per run from the engine's counters.
//   check     greedy runs (the default) must produce the same tokens in both
//             modes; a difference is reported and fails the command.
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "bench/stats.h"
#include "cli.h"
#include "model_flags.h"
#include "sluice/engine.h"

namespace sluice::cli {
namespace {

// Repeats itself, so prompt lookup has something to find.
constexpr const char* kDefaultPrompt =
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "The quick brown fox jumps over the lazy dog. The quick brown fox";

struct BenchSpecArgs {
  ModelFlags m;
  std::string prompt = kDefaultPrompt;
  int32_t n_gen = 128;
  int n_reps = 3;
  float temp = 0;
  bool json = false;
  EngineConfig spec;  // speculative flags
};

struct RunResult {
  std::vector<int32_t> tokens;
  double decode_tps = 0;
  EngineStats delta;  // counters of this run
};

StatusOr<RunResult> generate_once(Engine& e, const Request& r) {
  const EngineStats before = e.stats();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  RunResult out;
  RequestTimings t;
  std::string error;
  auto id = e.submit(r, [&](const TokenEvent& ev) {
    if (ev.token >= 0) out.tokens.push_back(ev.token);
    if (ev.finished && ev.finish_reason == FinishReason::kError) error = ev.error;
    if (ev.timings) {
      std::lock_guard<std::mutex> lock(mu);
      t = *ev.timings;
      done = true;
      cv.notify_all();
    }
  });
  if (!id.ok()) return id.status();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (!error.empty()) return internal_error("generation failed: {}", error);
  const double decode_s = t.e2e_s - t.ttft_s;
  out.decode_tps = out.tokens.size() > 1 ? static_cast<double>(out.tokens.size() - 1) / std::max(decode_s, 1e-9) : 0;
  const EngineStats after = e.stats();
  out.delta.spec_drafted = after.spec_drafted - before.spec_drafted;
  out.delta.spec_accepted = after.spec_accepted - before.spec_accepted;
  out.delta.spec_passes = after.spec_passes - before.spec_passes;
  out.delta.spec_emitted = after.spec_emitted - before.spec_emitted;
  return out;
}

int run(BenchSpecArgs a) {
  finish_speculative_options(&a.spec);
  if (a.spec.speculative == "off") return fail(invalid_argument("give --spec lookup or --draft-model PATH"));
  if (a.n_gen < 2 || a.n_reps < 1) return fail(invalid_argument("-n must be >= 2 and -r >= 1"));
  EngineConfig spec = a.m.engine_config(a.spec);
  spec.max_seqs = 1;
  fmt::print(stderr, "[sluice] bench-spec: loading {}{}\n", a.m.model,
             a.m.mem_budget ? fmt::format(" (weights beyond {} stream)", human_bytes(a.m.mem_budget)) : "");
  auto engine_or = Engine::create(spec);
  if (!engine_or.ok()) return fail(engine_or.status());
  Engine& engine = **engine_or;
  if (const std::string placement = engine.placement_report(); !placement.empty()) fmt::print(stderr, "{}", placement);
  const std::string spec_desc = engine.speculative_summary();
  fmt::print(stderr, "[sluice] {}\n", spec_desc);

  Request r{.prompt = engine.tokenizer().encode(a.prompt, true), .max_tokens = a.n_gen, .ignore_eos = true};
  r.sampling = SamplingParams{.temperature = a.temp, .seed = 1};
  if (r.prompt.empty()) return fail(invalid_argument("the prompt is empty"));
  if (static_cast<int64_t>(r.prompt.size()) + a.n_gen > engine.ctx_size()) {
    return fail(invalid_argument("prompt ({} tokens) + -n {} exceeds the context of {}", r.prompt.size(), a.n_gen,
                                 engine.ctx_size()));
  }
  Request plain_r = r;
  plain_r.speculative = false;
  for (const Request* q : {&plain_r, &r}) {
    Request warm = *q;
    warm.max_tokens = std::min(8, a.n_gen);
    auto w = generate_once(engine, warm);
    if (!w.ok()) return fail(w.status());
  }
  std::vector<double> plain_tps, spec_tps;
  EngineStats total;
  bool identical = true;
  for (int rep = 0; rep < a.n_reps; ++rep) {
    StatusOr<RunResult> p = internal_error("unset"), s = internal_error("unset");
    if (rep % 2 == 0) {
      p = generate_once(engine, plain_r);
      s = generate_once(engine, r);
    } else {
      s = generate_once(engine, r);
      p = generate_once(engine, plain_r);
    }
    if (!p.ok()) return fail(p.status());
    if (!s.ok()) return fail(s.status());
    plain_tps.push_back(p->decode_tps);
    spec_tps.push_back(s->decode_tps);
    total.spec_drafted += s->delta.spec_drafted;
    total.spec_accepted += s->delta.spec_accepted;
    total.spec_passes += s->delta.spec_passes;
    total.spec_emitted += s->delta.spec_emitted;
    if (a.temp <= 0 && p->tokens != s->tokens) identical = false;
    fmt::print(stderr, "[sluice] repetition {}: plain {:.2f} tok/s, speculative {:.2f} tok/s, acceptance {:.1f}%\n",
               rep + 1, p->decode_tps, s->decode_tps, 100.0 * s->delta.spec_acceptance_rate());
  }
  const double mp = bench::median(plain_tps), ms = bench::median(spec_tps);
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.m.model;
    j["speculative"] = spec_desc;
    j["prompt_tokens"] = r.prompt.size();
    j["n_gen"] = a.n_gen;
    j["repetitions"] = a.n_reps;
    j["mem_budget_bytes"] = a.m.mem_budget;
    j["plain_tps"] = mp;
    j["spec_tps"] = ms;
    j["ratio"] = mp > 0 ? ms / mp : 0.0;
    j["acceptance"] = total.spec_acceptance_rate();
    j["tokens_per_pass"] = total.spec_tokens_per_pass();
    j["drafted_per_run"] = static_cast<double>(total.spec_drafted) / a.n_reps;
    j["greedy_identical"] = a.temp <= 0 ? nlohmann::ordered_json(identical) : nlohmann::ordered_json(nullptr);
    j["plain_tps_runs"] = plain_tps;
    j["spec_tps_runs"] = spec_tps;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("model {} | prompt {} tokens, {} generated, {} repetitions{}\n{}\n\n", a.m.model, r.prompt.size(), a.n_gen,
               a.n_reps, a.m.mem_budget ? fmt::format(" | mem budget {}", human_bytes(a.m.mem_budget)) : "", spec_desc);
    fmt::print("| mode | decode tok/s (median) | ratio | acceptance | tokens per target pass | drafted per run |\n");
    fmt::print("|---|--:|--:|--:|--:|--:|\n");
    fmt::print("| plain | {:.2f} | 1.00 | - | 1.00 | 0 |\n", mp);
    fmt::print("| {} | {:.2f} | {:.2f} | {:.1f}% | {:.2f} | {:.0f} |\n", a.spec.speculative, ms, mp > 0 ? ms / mp : 0.0,
               100.0 * total.spec_acceptance_rate(), total.spec_tokens_per_pass(),
               static_cast<double>(total.spec_drafted) / a.n_reps);
    if (a.temp <= 0) fmt::print("\ngreedy outputs identical: {}\n", identical ? "yes" : "NO");
  }
  if (!identical) return fail(internal_error("greedy output differs with speculative decoding"));
  return 0;
}

}  // namespace

Runner add_bench_spec(CLI::App& app) {
  auto a = std::make_shared<BenchSpecArgs>();
  CLI::App* c = app.add_subcommand("bench-spec", "decode tokens/s with and without speculative decoding, side by side");
  a->m.add_to(c, {.model = "target model: GGUF file or HF folder", .gpu_budget = false, .lora = std::nullopt,
                  .parallel = false});
  c->add_option("-p,--prompt", a->prompt, "prompt text (default: a repetitive built-in text)");
  c->add_option("-n,--n-gen", a->n_gen, "tokens generated per run")->capture_default_str();
  c->add_option("-r,--repetitions", a->n_reps, "timed runs per engine")->capture_default_str();
  c->add_option("--temp", a->temp, "sampling temperature (default: greedy, outputs checked identical)");
  add_speculative_options(c, &a->spec);
  c->add_flag("--json", a->json, "print one JSON object instead of the table");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
