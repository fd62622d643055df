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
//             prediction's prefetches (what `--mem-budget` runs)
//   figures   per layer: the predictor's recall and precision, what it alone
//             would read per chosen expert, the share of chosen experts ready
//             when their layer routed, experts read per step; and the ready
//             rate against LRU's
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "default_model.h"
#include "runtime/routing_trace.h"

namespace sluice::cli {
namespace {

struct Args {
  std::string model;
  std::vector<std::string> prompts = {"Once upon a time", "One day", "Lily", "Tom and", "The sun was",
                                      "A little bird", "Sam had a", "There was a big"};
  int64_t n_generate = 100;
  int64_t slots = 0;
  int64_t slots_per_layer = 4;
  int n_threads = 0;
  bool json = false;
};

int run(const Args& a) {
  auto lm = load_model_verbose(a.model, {.n_threads = a.n_threads, .n_batch = 1, .predict_experts = true});
  if (!lm.ok()) return fail(lm.status());
  const ModelHparams& hp = lm->model->hparams();
  if (!hp.is_moe()) return fail(invalid_argument("{} is not a mixture-of-experts model", a.model));
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : a.prompts) prompts.push_back(lm->tokenizer->encode(p, true));
  auto trace = record_routing(*lm->model, prompts, a.n_generate);
  if (!trace.ok()) return fail(trace.status());
  int64_t n_moe = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) n_moe += hp.layer_is_moe(l);
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
                           {"usage+prediction", {.n_slots = slots, .policy = weights::CachePolicy::kUsage}}};
  for (Run& r : runs) r.layers = weights::replay_routing(*trace, r.options);
  const double lru = weights::replay_total(runs[0].layers).hit_rate();
  const double best = weights::replay_total(runs[2].layers).hit_rate();
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["steps"] = n_steps;
    j["slots"] = slots;
    for (const Run& r : runs) {
      nlohmann::ordered_json layers = nlohmann::json::array();
      for (const weights::ExpertLayerStats& l : r.layers)
        layers.push_back({{"recall", l.recall()}, {"precision", l.precision()}, {"ready", l.hit_rate()}, {"kept", l.kept_rate()},
                          {"predictor_fetch_ratio", l.predictor_fetch_ratio()}, {"reads_per_chosen", l.read_ratio()}});
      j[r.name] = layers;
    }
    j["ready_over_lru"] = lru > 0 ? best / lru : 0.0;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("{}: {} decode steps, {} routed layers x {} experts (top {}), {} slots ({:.1f} per routed layer)\n",
             a.model, n_steps, n_moe, hp.n_expert, hp.n_expert_used, slots, static_cast<double>(slots) / n_moe);
  for (const Run& r : runs)
    fmt::print("\n{}{}:\n{}", r.name, r.options.use_prediction ? "" : " (no prediction)",
               weights::replay_table(r.layers, n_steps));
  fmt::print("\nready when routed: {:.1f}% with prediction, {:.1f}% with LRU alone: {:.2f}x\n", 100 * best, 100 * lru,
             lru > 0 ? best / lru : 0.0);
  return 0;
}

}  // namespace

Runner add_bench_experts(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench-experts", "expert prediction and caching replayed on a MoE model's routing");
  add_model_option(c, &a->model, "mixture-of-experts GGUF file or HF folder", kMoeModel);
  c->add_option("-p,--prompt", a->prompts, "prompts to decode (repeatable; default: 8 story openings)");
  c->add_option("-n,--n-generate", a->n_generate, "greedy tokens after each prompt")->capture_default_str();
  c->add_option("--slots", a->slots, "expert slots in all (default: --slots-per-layer x routed layers)");
  c->add_option("--slots-per-layer", a->slots_per_layer, "expert slots per routed layer")->capture_default_str();
  c->add_option("-t,--threads", a->n_threads, "threads (default: all cores)");
  c->add_flag("--json", a->json, "one JSON object");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
