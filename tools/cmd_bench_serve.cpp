// sluice bench-serve: an offline load generator for the serving engine. It builds
// a synthetic workload (prompt lengths, output lengths and arrival times drawn
// from --seed), drives one in-process Engine with it and reports what a serving
// benchmark reports: throughput, TTFT / TPOT / E2E percentiles, KV use, prefix
// cache hits and preemptions.
//
//   workload  request i: prompt of P_i tokens, max_tokens O_i, arrival a_i
//             P_i = --shared-prefix LEN + draw(--prompt-len); O_i = draw(--output-len)
//             prompt = [BOS, s_1 .. s_{LEN-1} | u_LEN .. u_{P_i-1}]
//                       \_ same in every prompt _/ \_ own tokens _/
//             (BOS only if the model has one; with LEN = 0 all but BOS are own.)
//             Token ids are uniform over the vocabulary minus control, end-of-
//             generation and unknown tokens. a_i = 0 (--arrival all),
//             a_0 = 0, a_i = a_{i-1} + Exp(RATE) (--arrival poisson:RATE), or
//             a_i = SECONDS x i / n (--arrival ramp:SECONDS).
//   driver    this thread submits each request at t0 + a_i (with
//             --concurrency C: at t0 + a_i or when fewer than C of the
//             requests submitted are unfinished, whichever is later: a closed
//             loop of C clients, as a serving benchmark's "max concurrency";
//             TTFT counts from the submission, not from a_i), samples
//             Engine::stats() every few ms for KV block use (and, with
//             --timeline, the state over time: bench/timeline.h), and waits
//             until every request has finished. Requests ignore EOS, so each
//             generates exactly O_i tokens; sampling is greedy unless --temp.
//   figures   wall = last finish - t0; output_tps = sum O_i / wall; total_tps
//             adds the prompt tokens; TTFT / TPOT / E2E from each request's
//             RequestTimings, exact percentiles over requests (linear between
//             order statistics); TPOT over requests with more than one token.
//             prefix_hit_rate = the engine's (prompt tokens served from cache
//             / looked up), preemptions = sum over requests.
//
// Three independent streams keep one parameter from reshuffling the others:
// lengths (seed), token ids (seed + 1) and arrival gaps (seed + 2), all
// std::mt19937_64 (its output is fixed by the standard) turned into numbers
// here, not by the library's distributions, so a seed names one workload
// everywhere. --dump-workload writes it as JSON for other clients
// (bench/serve_client.py drives llama-server with the same requests).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli.h"
#include "bench/stats.h"
#include "bench/timeline.h"
#include "bench/workload_dist.h"
#include "model_flags.h"
#include "sluice/engine.h"

namespace sluice::cli {
namespace {

using nlohmann::ordered_json;
using bench::Arrival;
using bench::Dist;
using bench::Quantiles;
using bench::Rng;
using bench::parse_arrival;
using bench::parse_dist;
using bench::quantiles;

struct BenchServeArgs {
  ModelFlags m;
  int64_t n_requests = 64;
  std::string prompt_len = "uniform:16:256";
  std::string output_len = "128";
  std::string arrival = "all";
  int64_t concurrency = 0;  // requests unfinished at once, at most (0: no limit)
  int64_t shared_prefix = 0;
  uint64_t seed = 42;
  std::optional<float> temp;
  int64_t max_seqs = 16;
  int64_t max_batch_tokens = 512;
  uint64_t kv_budget_bytes = 0;
  bool fluid_split = false;
  double sample_ms = 5;
  double timeout_s = 600;
  std::string dump_workload;
  std::string dump_outputs;
  std::string timeline;  // --timeline FILE (.svg: a chart; else CSV)
  bool dump_only = false;
  bool json = false;
  EngineConfig spec;  // speculative flags only
};

struct WorkItem {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 0;
  double arrival_s = 0;
};

StatusOr<std::vector<WorkItem>> make_workload(const BenchServeArgs& a, const Tokenizer& tok) {
  ASSIGN_OR_RETURN(const Dist prompt_dist, parse_dist("--prompt-len", a.prompt_len));
  ASSIGN_OR_RETURN(const Dist output_dist, parse_dist("--output-len", a.output_len));
  ASSIGN_OR_RETURN(const Arrival arrival, parse_arrival(a.arrival));
  std::vector<int32_t> ordinary;  // ids a prompt may hold
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (!tok.is_control(id) && !tok.is_eog(id) && id != tok.vocab().unk_id()) ordinary.push_back(id);
  }
  if (ordinary.empty()) return invalid_argument("the vocabulary has no ordinary tokens to build prompts from");

  Rng len_rng(a.seed), tok_rng(a.seed + 1), gap_rng(a.seed + 2);
  auto random_token = [&] { return ordinary[tok_rng.below(ordinary.size())]; };
  std::vector<int32_t> prefix;
  for (int64_t i = 0; i < a.shared_prefix; ++i) prefix.push_back(i == 0 && tok.bos_id() >= 0 ? tok.bos_id() : random_token());

  std::vector<WorkItem> items(static_cast<size_t>(a.n_requests));
  double t = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    WorkItem& w = items[i];
    const int64_t n_own = draw(prompt_dist, len_rng);
    w.max_tokens = static_cast<int32_t>(std::min<int64_t>(draw(output_dist, len_rng), INT32_MAX));
    w.prompt = prefix;
    while (static_cast<int64_t>(w.prompt.size()) < a.shared_prefix + n_own) {
      w.prompt.push_back(w.prompt.empty() && tok.bos_id() >= 0 ? tok.bos_id() : random_token());
    }
    t = arrival.next(t, i, items.size(), arrival.rate > 0 && i > 0 ? gap_rng.uniform01() : 0.0);
    w.arrival_s = t;
  }
  return items;
}

Status dump_workload(const std::string& path, const std::vector<WorkItem>& items) {
  ordered_json list = ordered_json::array();
  for (const WorkItem& w : items) {
    list.push_back({{"prompt_tokens", w.prompt}, {"max_tokens", w.max_tokens}, {"arrival_s", w.arrival_s}});
  }
  std::ofstream f(path);
  if (!f) return io_error("--dump-workload: cannot write {}", path);
  f << list.dump() << "\n";
  if (!f) return io_error("--dump-workload: write to {} failed", path);
  return Status();
}

// What the engine thread hands back; guarded by mu.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<RequestTimings>> timings;  // [n_requests]
  std::vector<int64_t> n_tokens;                       // [n_requests] token events seen
  std::vector<std::vector<int32_t>> outputs;           // [n_requests] the tokens (--dump-outputs)
  int64_t n_done = 0;
  double t_last_finish = 0;
  std::string error;  // first request that did not end by length
};

struct RunFigures {
  double wall_s = 0;
  std::vector<RequestTimings> timings;
  std::vector<std::vector<int32_t>> outputs;  // [n_requests] each request's tokens
  double kv_util_peak = 0, kv_util_mean = 0;
  int64_t n_kv_samples = 0;
  bench::Timeline timeline;  // the engine's state at each sample that changed it
};

EventCallback track(Progress& p, size_t i) {
  return [&p, i](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(p.mu);
    if (ev.token >= 0) {
      ++p.n_tokens[i];
      p.outputs[i].push_back(ev.token);
    }
    if (ev.finished && ev.finish_reason != FinishReason::kLength && p.error.empty()) {
      p.error = fmt::format("request {} ended with '{}'{}", i, finish_reason_name(ev.finish_reason),
                            ev.error.empty() ? "" : ": " + ev.error);
    }
    if (ev.timings) {
      p.timings[i] = *ev.timings;
      p.t_last_finish = now_seconds();
      ++p.n_done;
      p.cv.notify_all();
    }
  };
}

Request make_request(const BenchServeArgs& a, const WorkItem& w, size_t i) {
  SamplingParams s;
  s.temperature = a.temp.value_or(0.0f);
  s.seed = a.seed + i;
  Request r{.prompt = w.prompt, .max_tokens = w.max_tokens, .sampling = s, .ignore_eos = true};
  if (!a.m.loras.empty()) r.loras = {static_cast<int32_t>(i % a.m.loras.size())};
  return r;
}

// Submits every item at t0 + arrival_s, samples KV use every a.sample_ms, and
// waits for all to finish (or a.timeout_s, then aborts the rest).
StatusOr<RunFigures> drive(Engine& engine, const BenchServeArgs& a, const std::vector<WorkItem>& items) {
  Progress p;
  const size_t n = items.size();
  p.timings.resize(n);
  p.n_tokens.assign(n, 0);
  p.outputs.resize(n);
  std::vector<RequestId> ids;
  RunFigures fig;
  double kv_util_sum = 0;
  const EngineStats before = engine.stats();  // the warm-up's counts, left out of the timeline
  double t0 = now_seconds();
  auto sample_kv = [&] {
    const EngineStats s = engine.stats();
    if (!a.timeline.empty())
      fig.timeline.add({.t_s = now_seconds() - t0,
                        .running = s.running,
                        .waiting = s.waiting,
                        .kv_used = s.kv_blocks_used,
                        .kv_total = s.kv_blocks_total,
                        .demoted = s.fluid_demoted_units,
                        .preemptions = s.preemptions - before.preemptions,
                        .finished = s.finished_requests - before.finished_requests});
    if (s.kv_blocks_total <= 0) return;
    const double u = static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total);
    fig.kv_util_peak = std::max(fig.kv_util_peak, u);
    kv_util_sum += u;
    ++fig.n_kv_samples;
  };
  auto abort_all = [&] {
    for (RequestId id : ids) engine.abort(id);
    std::unique_lock<std::mutex> lock(p.mu);
    p.cv.wait_for(lock, std::chrono::seconds(30), [&] { return p.n_done == static_cast<int64_t>(ids.size()); });
  };

  t0 = now_seconds();
  size_t next = 0;
  for (;;) {
    const double now = now_seconds() - t0;
    auto slot_free = [&] {
      if (a.concurrency <= 0) return true;
      std::lock_guard<std::mutex> lock(p.mu);
      return static_cast<int64_t>(next) - p.n_done < a.concurrency;
    };
    while (next < n && items[next].arrival_s <= now && slot_free()) {
      auto id = engine.submit(make_request(a, items[next], next), track(p, next));
      if (!id.ok()) {
        abort_all();
        return id.status().with_context(fmt::format("submitting request {}", next));
      }
      ids.push_back(*id);
      ++next;
    }
    sample_kv();
    if (now > a.timeout_s) {
      abort_all();
      return resource_exhausted("timed out after {:.0f} s (--timeout) with {} of {} requests finished", a.timeout_s,
                                p.n_done, n);
    }
    // A request already due is held back by --concurrency: wait for a finish.
    const bool held = next < n && items[next].arrival_s <= now;
    const double until_arrival = next < n && !held ? items[next].arrival_s - now : a.sample_ms / 1e3;
    const double wait_s = std::clamp(std::min(until_arrival, a.sample_ms / 1e3), 0.0, a.sample_ms / 1e3);
    std::unique_lock<std::mutex> lock(p.mu);
    if (next == n && p.n_done == static_cast<int64_t>(n)) break;
    if (!p.error.empty()) {
      lock.unlock();
      const std::string error = p.error;
      abort_all();
      return internal_error("{}", error);
    }
    if (held && static_cast<int64_t>(next) - p.n_done < a.concurrency) continue;  // one finished since
    p.cv.wait_for(lock, std::chrono::duration<double>(wait_s));
  }
  sample_kv();  // the state at the end
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.error.empty()) return internal_error("{}", p.error);
  fig.wall_s = p.t_last_finish - t0;
  fig.kv_util_mean = fig.n_kv_samples > 0 ? kv_util_sum / static_cast<double>(fig.n_kv_samples) : 0;
  for (size_t i = 0; i < n; ++i) {
    const RequestTimings& t = *p.timings[i];
    if (t.n_generated != items[i].max_tokens || p.n_tokens[i] != t.n_generated) {
      return internal_error("request {} generated {} tokens ({} events), expected {}", i, t.n_generated, p.n_tokens[i],
                            items[i].max_tokens);
    }
    fig.timings.push_back(t);
  }
  fig.outputs = std::move(p.outputs);
  return fig;
}

// One untimed request, so the weights are paged in before the clock starts. Its
// one-token prompt fills no KV block, so it leaves nothing in the prefix cache.
Status warm_up(Engine& engine, const std::vector<WorkItem>& items) {
  Progress p;
  p.timings.resize(1);
  p.n_tokens.assign(1, 0);
  p.outputs.resize(1);
  Request r{.prompt = {items.front().prompt.front()}, .max_tokens = 2, .sampling = {.temperature = 0}, .ignore_eos = true};
  ASSIGN_OR_RETURN(const RequestId id, engine.submit(r, track(p, 0)));
  std::unique_lock<std::mutex> lock(p.mu);
  if (!p.cv.wait_for(lock, std::chrono::seconds(120), [&] { return p.n_done == 1; })) {
    lock.unlock();
    engine.abort(id);
    return resource_exhausted("the warm-up request did not finish in 120 s");
  }
  return Status();
}

int run(const BenchServeArgs& a) {
  if (a.n_requests < 1) return fail(invalid_argument("--requests must be >= 1 (got {})", a.n_requests));
  if (a.shared_prefix < 0) return fail(invalid_argument("--shared-prefix must be >= 0 (got {})", a.shared_prefix));
  if (a.max_seqs < 1) return fail(invalid_argument("--max-seqs must be >= 1 (got {})", a.max_seqs));
  if (a.concurrency < 0) return fail(invalid_argument("--concurrency must be >= 0 (got {})", a.concurrency));
  if (a.max_batch_tokens < 1) return fail(invalid_argument("--max-batch-tokens must be >= 1 (got {})", a.max_batch_tokens));
  if (!(a.sample_ms > 0)) return fail(invalid_argument("--sample-ms must be > 0"));
  if (a.dump_only && a.dump_workload.empty()) return fail(invalid_argument("--dump-only needs --dump-workload FILE"));
  // Malformed distributions fail before any file is opened.
  for (auto [flag, text] : {std::pair{"--prompt-len", &a.prompt_len}, std::pair{"--output-len", &a.output_len}}) {
    if (auto d = parse_dist(flag, *text); !d.ok()) return fail(d.status());
  }
  if (auto arr = parse_arrival(a.arrival); !arr.ok()) return fail(arr.status());
  // Output files that cannot be written fail now, not after the run.
  for (auto [flag, path] : {std::pair{"--dump-outputs", &a.dump_outputs}, std::pair{"--timeline", &a.timeline}}) {
    if (!path->empty() && !std::ofstream(*path)) return fail(io_error("{}: cannot write {}", flag, *path));
  }

  if (a.dump_only) {
    auto tok = load_tokenizer(a.m.model);
    if (!tok.ok()) return fail(tok.status());
    auto items = make_workload(a, **tok);
    if (!items.ok()) return fail(items.status());
    if (Status s = dump_workload(a.dump_workload, *items); !s.ok()) return fail(s);
    fmt::print(stderr, "[sluice] bench-serve: wrote {} requests to {}\n", items->size(), a.dump_workload);
    return 0;
  }

  std::optional<int> worker_exit;
  auto parallel = a.m.join(&worker_exit);
  if (!parallel.ok()) return fail(parallel.status());
  if (worker_exit) return *worker_exit;
  // a.spec holds the speculative flags only; request i runs with adapter i mod the --lora count.
  EngineConfig cfg = a.m.engine_config(a.spec);
  finish_speculative_options(&cfg);
  cfg.max_batch_tokens = a.max_batch_tokens;
  cfg.max_seqs = a.max_seqs;
  cfg.kv_budget_bytes = a.kv_budget_bytes;
  cfg.fluid_split = a.fluid_split;
  cfg.max_queued = std::max<int64_t>(1024, a.n_requests);
  cfg.parallel = *parallel;
  Stopwatch load_sw;
  auto engine_or = Engine::create(cfg);
  if (!engine_or.ok()) return fail(engine_or.status());
  Engine& engine = **engine_or;
  const double load_s = load_sw.seconds();
  fmt::print(stderr, "[sluice] bench-serve {}: loaded in {:.2f} s\n[sluice] {}\n", a.m.model, load_s, engine.summary());
  if (!a.json && !engine.placement_report().empty()) fmt::print(stderr, "{}", engine.placement_report());
  if (const std::string spec = engine.speculative_summary(); !spec.empty()) fmt::print(stderr, "[sluice] {}\n", spec);

  auto items_or = make_workload(a, engine.tokenizer());
  if (!items_or.ok()) return fail(items_or.status());
  const std::vector<WorkItem>& items = *items_or;
  if (!a.dump_workload.empty()) {
    if (Status s = dump_workload(a.dump_workload, items); !s.ok()) return fail(s);
  }
  int64_t n_prompt_tokens = 0, n_output_tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t need = static_cast<int64_t>(items[i].prompt.size()) + items[i].max_tokens;
    if (need > engine.ctx_size()) {
      return fail(invalid_argument("request {}: {} prompt + {} output tokens exceed the context of {} per sequence "
                                   "(shorten the lengths or raise --ctx-size)",
                                   i, items[i].prompt.size(), items[i].max_tokens, engine.ctx_size()));
    }
    n_prompt_tokens += static_cast<int64_t>(items[i].prompt.size());
    n_output_tokens += items[i].max_tokens;
  }

  if (Status s = warm_up(engine, items); !s.ok()) return fail(s);
  auto fig_or = drive(engine, a, items);
  if (!fig_or.ok()) return fail(fig_or.status());
  const RunFigures& fig = *fig_or;
  if (!a.dump_outputs.empty()) {
    std::ofstream f(a.dump_outputs);
    f << ordered_json(fig.outputs).dump() << "\n";
    if (!f) return fail(io_error("--dump-outputs: cannot write {}", a.dump_outputs));
  }
  if (!a.timeline.empty()) {
    const std::string title =
        fmt::format("{}: {} requests, prompt {}, output {}, arrival {}{}, --max-seqs {}{}",
                    std::filesystem::path(a.m.model).filename().string(), a.n_requests, a.prompt_len, a.output_len,
                    a.arrival, a.concurrency > 0 ? fmt::format(", {} at a time", a.concurrency) : "", a.max_seqs,
                    a.fluid_split ? ", --fluid-split" : "");
    if (Status s = fig.timeline.write(a.timeline, title); !s.ok()) return fail(s);
  }

  // The engine's cumulative rate (RequestTimings::n_cached_prompt is not filled
  // in); the warm-up adds one looked-up token.
  const double prefix_hit_rate = engine.stats().prefix_hit_rate;
  std::vector<double> ttft, tpot, e2e;
  int64_t n_preemptions = 0;
  for (const RequestTimings& t : fig.timings) {
    ttft.push_back(t.ttft_s);
    if (t.n_generated > 1) tpot.push_back(t.tpot_s);
    e2e.push_back(t.e2e_s);
    n_preemptions += t.n_preemptions;
  }
  const Quantiles q_ttft = quantiles(ttft), q_tpot = quantiles(tpot), q_e2e = quantiles(e2e);
  const double wall = fig.wall_s;
  const double output_tps = static_cast<double>(n_output_tokens) / wall;
  const double total_tps = static_cast<double>(n_prompt_tokens + n_output_tokens) / wall;
  const double req_per_s = static_cast<double>(items.size()) / wall;

  if (a.json) {
    ordered_json j;
    j["n_requests"] = items.size();
    j["wall_s"] = wall;
    j["n_prompt_tokens"] = n_prompt_tokens;
    j["n_output_tokens"] = n_output_tokens;
    j["output_tps"] = output_tps;
    j["total_tps"] = total_tps;
    j["req_per_s"] = req_per_s;
    for (auto [name, q] : {std::pair{"ttft", q_ttft}, std::pair{"tpot", q_tpot}, std::pair{"e2e", q_e2e}}) {
      j[fmt::format("{}_p50_s", name)] = q.p50;
      j[fmt::format("{}_p90_s", name)] = q.p90;
      j[fmt::format("{}_p99_s", name)] = q.p99;
      j[fmt::format("{}_mean_s", name)] = q.mean;
    }
    j["kv_util_peak"] = fig.kv_util_peak;
    j["kv_util_mean"] = fig.kv_util_mean;
    j["kv_samples"] = fig.n_kv_samples;
    j["prefix_hit_rate"] = prefix_hit_rate;
    j["preemptions"] = n_preemptions;
    j["load_s"] = load_s;
    j["engine"] = engine.summary();
    const EngineStats es = engine.stats();
    j["fluid_demotions"] = es.fluid_demotions;
    j["fluid_promotions"] = es.fluid_promotions;
    j["fluid_demoted_units"] = es.fluid_demoted_units;
    j["spec_drafted"] = es.spec_drafted;
    j["spec_accepted"] = es.spec_accepted;
    j["spec_acceptance_rate"] = es.spec_acceptance_rate();
    j["spec_tokens_per_pass"] = es.spec_tokens_per_pass();
    if (const std::string w = engine.weights_json(); !w.empty()) j["weights"] = nlohmann::json::parse(w);
    j["config"] = {{"model", a.m.model},
                   {"requests", a.n_requests},
                   {"prompt_len", a.prompt_len},
                   {"output_len", a.output_len},
                   {"arrival", a.arrival},
                   {"concurrency", a.concurrency},
                   {"shared_prefix", a.shared_prefix},
                   {"seed", a.seed},
                   {"temp", a.temp.value_or(0.0f)},
                   {"n_threads", a.m.n_threads},
                   {"max_seqs", a.max_seqs},
                   {"max_batch_tokens", a.max_batch_tokens},
                   {"ctx_size", engine.ctx_size()},
                   {"kv_budget_bytes", a.kv_budget_bytes}};
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  fmt::print("bench-serve: {} requests, prompt {}{} ({} tokens), output {} ({} tokens), arrival {}{}, seed {}\n",
             items.size(), a.prompt_len, a.shared_prefix > 0 ? fmt::format(" + shared prefix {}", a.shared_prefix) : "",
             n_prompt_tokens, a.output_len, n_output_tokens, a.arrival,
             a.concurrency > 0 ? fmt::format(", {} at a time", a.concurrency) : "", a.seed);
  fmt::print("wall {:.3f} s | output {:.2f} tok/s | total {:.2f} tok/s | {:.3f} req/s\n", wall, output_tps, total_tps,
             req_per_s);
  fmt::print("| {:<10} | {:>10} | {:>10} | {:>10} | {:>10} |\n", "ms", "p50", "p90", "p99", "mean");
  fmt::print("| {:-<10} | {:->10} | {:->10} | {:->10} | {:->10} |\n", "", "", "", "", "");
  for (auto [name, q] : {std::pair{"TTFT", q_ttft}, std::pair{"TPOT", q_tpot}, std::pair{"E2E", q_e2e}}) {
    fmt::print("| {:<10} | {:>10.2f} | {:>10.2f} | {:>10.2f} | {:>10.2f} |\n", name, q.p50 * 1e3, q.p90 * 1e3,
               q.p99 * 1e3, q.mean * 1e3);
  }
  fmt::print("KV blocks used: peak {:.1f}%, mean {:.1f}% ({} samples) | prefix cache hits {:.1f}% | preemptions {}\n",
             100 * fig.kv_util_peak, 100 * fig.kv_util_mean, fig.n_kv_samples, 100 * prefix_hit_rate, n_preemptions);
  if (const std::string spec = speculative_line(engine.stats()); !spec.empty()) fmt::print("{}\n", spec);
  if (cfg.fluid_split) {
    const EngineStats es = engine.stats();
    fmt::print("fluid split: {} units given up to the KV pool, {} taken back, {} given up at the end\n", es.fluid_demotions,
               es.fluid_promotions, es.fluid_demoted_units);
  }
  if (const std::string w = engine.weights_report(); !w.empty()) fmt::print("{}", w);
  if (const std::string b = engine.backend_report(); !b.empty()) fmt::print("{}\n", b);
  return 0;
}

}  // namespace

Runner add_bench_serve(CLI::App& app) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* c = app.add_subcommand("bench-serve", "drive the serving engine with a synthetic workload; report "
                                                  "throughput, TTFT/TPOT/E2E percentiles, KV use");
  a->m.add_to(c, {.ctx = "positions per sequence (default: min(trained, 4096))",
                  .lora = "request i runs with adapter i mod their count"});
  c->add_option("--requests", a->n_requests, "number of requests")->capture_default_str();
  c->add_option("--prompt-len", a->prompt_len, "prompt tokens per request: N, uniform:A:B or normal:MEAN:SD")
      ->capture_default_str();
  c->add_option("--output-len", a->output_len, "generated tokens per request: N, uniform:A:B or normal:MEAN:SD")
      ->capture_default_str();
  c->add_option("--arrival", a->arrival, "all (every request at t = 0), poisson:RATE (requests/s) or ramp:SECONDS (evenly spread over them)")
      ->capture_default_str();
  c->add_option("--concurrency", a->concurrency,
                "at most this many requests unfinished at once: the next is submitted when one finishes, and its TTFT "
                "counts from then (a closed loop of clients, a serving benchmark's max concurrency; 0: no limit)")
      ->capture_default_str();
  c->add_option("--shared-prefix", a->shared_prefix, "tokens every prompt starts with (BOS included), before its own")
      ->capture_default_str();
  c->add_option("--seed", a->seed, "seed of lengths, token ids and arrivals")->capture_default_str();
  c->add_option("--temp", a->temp, "sampling temperature (default: greedy)");
  c->add_option("--max-seqs", a->max_seqs, "sequences running at once")->capture_default_str();
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "tokens per engine step")->capture_default_str();
  c->add_option("--kv-budget", a->kv_budget_bytes, "KV pool bytes (default: the engine's)");
  c->add_flag("--fluid-split", a->fluid_split,
              "with --mem-budget, or --gpu-budget on cuda: resident layers and the KV pool share the budget "
              "(layers stream instead of preempting)");
  c->add_option("--sample-ms", a->sample_ms, "period of the KV use samples")->capture_default_str();
  c->add_option("--timeout", a->timeout_s, "abort and fail after this many seconds")->capture_default_str();
  c->add_option("--dump-workload", a->dump_workload,
                "write the workload as JSON [{prompt_tokens, max_tokens, arrival_s}, ...]");
  c->add_option("--dump-outputs", a->dump_outputs, "write each request's generated token ids as JSON [[...], ...]");
  c->add_option("--timeline", a->timeline,
                "write the engine's state over the run (requests running / waiting, KV blocks used / in the pool, "
                "fluid split units given up, preemptions): FILE.svg a chart, any other name CSV");
  c->add_flag("--dump-only", a->dump_only, "write --dump-workload and exit (loads only the tokenizer)");
  add_speculative_options(c, &a->spec);
  c->add_flag("--json", a->json, "print one JSON object instead of the table");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
