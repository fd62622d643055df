// sluice bench-experts: how well a routed model's experts can be predicted and
// cached, judged on the model's own routing.
//
//   trace     the model decodes the prompts token by token (then -n greedy
//             tokens each), reporting per step and routed layer the experts its
//             routing chose and those predicted for the layer before it ran
//             (the layer's router on the state entering it: model/model.h)
//   replay    the trace through the expert cache the weight store runs
//             (weights/expert_replay.h), with --slots slots in all
//             (default: --slots-per-layer x routed layers), three ways: plain
//             LRU, the usage policy alone, and the usage policy with the
//             prediction's prefetches (what `--mem-budget` runs); then that
//             last one again with arrival times: reads at the disk rate
//             (--disk-gbps, default: probed on the model file with O_DIRECT)
//             and each routed layer computing for the time it took in the
//             trace (--layer-ms to set it), so a prefetch can land late
//   figures   per layer: the predictor's recall and precision, what it alone
//             would read per chosen expert, the share of chosen experts ready
//             when their layer routed (late and missed, and how late), experts
//             read per step; and the ready rate against LRU's
//   live      with --mem-budget: the same prompts decoded again with the
//             experts streamed under that budget (the weight store's real
//             reads, as `run` and `serve` stream them), its per-layer ready /
//             late / missed beside the timed replay's with the live run's
//             slot count: how far the replay's arrival model is from the engine
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli.h"
#include "model_flags.h"
#include "plan/calibrate.h"
#include "runtime/routing_trace.h"
#include "weights/expert_store.h"
#include "weights/store_source.h"

namespace sluice::cli {
namespace {

struct Args {
  ModelFlags m;
  std::vector<std::string> prompts = {"Once upon a time", "One day", "Lily", "Tom and", "The sun was",
                                      "A little bird", "Sam had a", "There was a big"};
  int64_t n_generate = 100;
  int64_t slots = 0;
  int64_t slots_per_layer = 4;
  double disk_gbps = 0;  // 0: probe the model file
  double layer_ms = -1;  // < 0: measured while tracing
  float predict_margin = kExpertPredictMargin;
  bool json = false;
};

// The prompts decoded again with the experts streamed under --mem-budget.
struct LiveRun {
  weights::ExpertStatsSnapshot stats;
  bool same_routing = false;  // chose what the resident trace chose, step by step
  double decode_s = 0;
};

StatusOr<LiveRun> run_live(const Args& a, const std::vector<std::vector<int32_t>>& prompts,
                           const weights::RoutingTrace& resident) {
  LoadOptions o = a.m.load_options();
  o.n_batch = 1;
  o.predict_experts = true;
  o.expert_predict_margin = a.predict_margin;
  ASSIGN_OR_RETURN(LoadedModel lm, load_model_verbose(a.m.model, o));
  if (!lm.stream || !lm.stream->store().streams_experts())
    return invalid_argument("--mem-budget {} B holds every expert of {}: nothing streams live (give a smaller budget)",
                            a.m.mem_budget, a.m.model);
  Stopwatch decode;
  ASSIGN_OR_RETURN(const weights::RoutingTrace trace, record_routing(*lm.model, prompts, a.n_generate));
  LiveRun r{.stats = lm.stream->store().expert_stats(), .decode_s = decode.seconds()};
  r.same_routing = trace.steps.size() == resident.steps.size();
  for (size_t s = 0; r.same_routing && s < trace.steps.size(); ++s)
    for (size_t l = 0; r.same_routing && l < trace.steps[s].size(); ++l)
      r.same_routing = trace.steps[s][l].chosen == resident.steps[s][l].chosen;
  return r;
}

// Per routed layer: the timed replay (with the live run's slots) beside the live run.
void print_live(const LiveRun& live, const std::vector<weights::ExpertLayerStats>& replay, const ModelHparams& hp) {
  auto pct = [](uint64_t n, uint64_t of) { return 100.0 * static_cast<double>(n) / std::max<double>(1, of); };
  fmt::print("\nlive, experts streamed ({} slots; decode {:.2f} s; routing {} the resident trace's):\n",
             live.stats.n_slots, live.decode_s, live.same_routing ? "identical to" : "differs from");
  fmt::print("| layer | replay ready | replay late (ms) | replay missed | live ready | live late (ms) | live missed |\n");
  fmt::print("|--:|--:|--:|--:|--:|--:|--:|\n");
  auto row = [&](const std::string& name, const weights::ExpertLayerStats& p, const weights::ExpertLayerStats& l) {
    fmt::print("| {} | {:.1f}% | {:.1f}% ({:.3f}) | {:.1f}% | {:.1f}% | {:.1f}% ({:.3f}) | {:.1f}% |\n", name,
               pct(p.ready, p.chosen), pct(p.late, p.chosen), p.late_mean_ms(), pct(p.missed, p.chosen),
               pct(l.ready, l.chosen), pct(l.late, l.chosen), l.late_mean_ms(), pct(l.missed, l.chosen));
  };
  weights::ExpertLayerStats p_all, l_all;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.layer_is_moe(l) || static_cast<size_t>(l) >= replay.size() || static_cast<size_t>(l) >= live.stats.layers.size())
      continue;
    row(std::to_string(l), replay[l], live.stats.layers[l]);
    p_all += replay[l];
    l_all += live.stats.layers[l];
  }
  row("all", p_all, l_all);
}

int run(const Args& a) {
  auto lm = load_model_verbose(a.m.model, {.n_threads = a.m.n_threads, .n_batch = 1, .predict_experts = true,
                                         .expert_predict_margin = a.predict_margin});
  if (!lm.ok()) return fail(lm.status());
  const ModelHparams& hp = lm->model->hparams();
  if (!hp.is_moe()) return fail(invalid_argument("{} is not a mixture-of-experts model", a.m.model));
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : a.prompts) prompts.push_back(lm->tokenizer->encode(p, true));
  Stopwatch traced;
  auto trace = record_routing(*lm->model, prompts, a.n_generate);
  if (!trace.ok()) return fail(trace.status());
  const double trace_s = traced.seconds();
  int64_t n_moe = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) n_moe += hp.layer_is_moe(l);
  double disk_gbps = a.disk_gbps;
  if (disk_gbps <= 0) {
    auto probe = plan::probe_disk_read(a.m.model, "/tmp", uint64_t{256} << 20);
    if (!probe.ok()) return fail(probe.status());
    disk_gbps = probe->gbps;
  }
  // --disk-rate-cap caps the live run's reads: the replay reads at that disk too.
  if (a.m.disk_rate_cap > 0) disk_gbps = std::min(disk_gbps, a.m.disk_rate_cap / 1e9);
  // The trace decodes with every weight resident: its time per routed layer
  // is the compute a layer's prefetch can hide behind.
  const double layer_s = a.layer_ms >= 0 ? a.layer_ms / 1e3
                                         : trace_s / static_cast<double>(std::max<size_t>(1, trace->steps.size()) * n_moe);
  const uint64_t expert_bytes = weights::ExpertStore::expert_bytes_for(*lm->file, hp);
  const int64_t slots = a.slots > 0 ? a.slots : a.slots_per_layer * n_moe;
  if (slots < hp.n_expert)
    return fail(invalid_argument("{} slots cannot hold one layer's {} experts", slots, hp.n_expert));
  const auto n_steps = static_cast<int64_t>(trace->steps.size());
  struct Run {
    const char* name;
    weights::ReplayOptions options;
    std::vector<weights::ExpertLayerStats> layers;
  };
  std::vector<Run> runs = {{"lru", {.n_slots = slots, .policy = weights::CachePolicy::kLru, .use_prediction = false}},
                           {"usage", {.n_slots = slots, .policy = weights::CachePolicy::kUsage, .use_prediction = false}},
                           {"usage+prediction", {.n_slots = slots, .policy = weights::CachePolicy::kUsage}},
                           {"usage+prediction+timed",
                            {.n_slots = slots, .policy = weights::CachePolicy::kUsage, .disk_bytes_per_s = disk_gbps * 1e9,
                             .expert_bytes = expert_bytes, .layer_s = layer_s}}};
  for (Run& r : runs) r.layers = weights::replay_routing(*trace, r.options);
  const double lru = weights::replay_total(runs[0].layers).hit_rate();
  const double best = weights::replay_total(runs[2].layers).hit_rate();
  // Live: the same decode with the experts streamed, and the timed replay again with its slots.
  std::optional<LiveRun> live;
  if (a.m.mem_budget > 0) {
    auto l = run_live(a, prompts, *trace);
    if (!l.ok()) return fail(l.status());
    live = std::move(*l);
    runs.push_back({"usage+prediction+timed (live's slots)",
                    {.n_slots = live->stats.n_slots, .policy = weights::CachePolicy::kUsage,
                     .disk_bytes_per_s = disk_gbps * 1e9, .expert_bytes = expert_bytes, .layer_s = layer_s}});
    runs.back().layers = weights::replay_routing(*trace, runs.back().options);
  }
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.m.model;
    j["steps"] = n_steps;
    j["slots"] = slots;
    j["disk_gbps"] = disk_gbps;
    j["expert_bytes"] = expert_bytes;
    j["layer_ms"] = layer_s * 1e3;
    for (const Run& r : runs) {
      nlohmann::ordered_json layers = nlohmann::json::array();
      for (const weights::ExpertLayerStats& l : r.layers)
        layers.push_back({{"recall", l.recall()}, {"precision", l.precision()}, {"ready", l.hit_rate()}, {"kept", l.kept_rate()},
                          {"predictor_fetch_ratio", l.predictor_fetch_ratio()}, {"reads_per_chosen", l.read_ratio()},
                          {"chosen", l.chosen}, {"late", l.late}, {"missed", l.missed}, {"late_ms_mean", l.late_mean_ms()}});
      j[r.name] = layers;
    }
    j["ready_over_lru"] = lru > 0 ? best / lru : 0.0;
    j["timed_ready"] = weights::replay_total(runs[3].layers).hit_rate();
    if (live) {
      nlohmann::ordered_json layers = nlohmann::json::array();
      for (const weights::ExpertLayerStats& l : live->stats.layers)
        layers.push_back({{"ready", l.hit_rate()}, {"chosen", l.chosen}, {"late", l.late}, {"missed", l.missed},
                          {"late_ms_mean", l.late_mean_ms()}, {"late_ms_max", 1e3 * l.late_max_s}});
      j["live"] = {{"mem_budget", a.m.mem_budget}, {"slots", live->stats.n_slots}, {"same_routing", live->same_routing},
                   {"decode_s", live->decode_s}, {"layers", layers},
                   {"ready", live->stats.total().hit_rate()},
                   {"replay_ready", weights::replay_total(runs.back().layers).hit_rate()}};
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}: {} decode steps, {} routed layers x {} experts (top {}), {} slots ({:.1f} per routed layer)\n",
             a.m.model, n_steps, n_moe, hp.n_expert, hp.n_expert_used, slots, static_cast<double>(slots) / n_moe);
  fmt::print("timed: {:.2f} GB/s disk, experts of {} bytes ({:.3f} ms a read), {:.3f} ms of compute per routed layer\n",
             disk_gbps, expert_bytes, static_cast<double>(expert_bytes) / (disk_gbps * 1e9) * 1e3, layer_s * 1e3);
  for (const Run& r : runs)
    fmt::print("\n{}{}:\n{}", r.name, r.options.use_prediction ? "" : " (no prediction)",
               weights::replay_table(r.layers, n_steps));
  fmt::print("\nready when routed: {:.1f}% with prediction, {:.1f}% with LRU alone: {:.2f}x\n", 100 * best, 100 * lru,
             lru > 0 ? best / lru : 0.0);
  const weights::ExpertLayerStats timed = weights::replay_total(runs[3].layers);
  fmt::print("with arrival times: {:.1f}% ready, {:.1f}% late (by {:.3f} ms on average), {:.1f}% missed\n",
             100 * timed.hit_rate(), 100.0 * static_cast<double>(timed.late) / std::max<double>(1, timed.chosen),
             timed.late_mean_ms(), 100.0 * static_cast<double>(timed.missed) / std::max<double>(1, timed.chosen));
  if (live) print_live(*live, runs.back().layers, hp);
  return 0;
}

}  // namespace

Runner add_bench_experts(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench-experts", "expert prediction and caching replayed on a MoE model's routing");
  a->m.add_to(c, {.model = "mixture-of-experts GGUF file or HF folder", .fallback = kMoeModel, .mem_budget = true,
                  .gpu_budget = false, .backend = false, .lora = std::nullopt, .parallel = false});
  c->add_option("-p,--prompt", a->prompts, "prompts to decode (repeatable; default: 8 story openings)");
  c->add_option("-n,--n-generate", a->n_generate, "greedy tokens after each prompt")->capture_default_str();
  c->add_option("--slots", a->slots, "expert slots in all (default: --slots-per-layer x routed layers)");
  c->add_option("--slots-per-layer", a->slots_per_layer, "expert slots per routed layer")->capture_default_str();
  c->add_option("--disk-gbps", a->disk_gbps, "disk read rate of the timed replay (default: probed on the model file)");
  c->add_option("--layer-ms", a->layer_ms, "compute per routed layer in the timed replay (default: as traced)");
  c->add_option("--predict-margin", a->predict_margin,
                "predict experts past the top k whose probability is at least this share of the k-th's")
      ->capture_default_str();
  c->add_flag("--json", a->json, "one JSON object");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
