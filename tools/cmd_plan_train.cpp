// sluice plan train: essay 002's training model on this machine's tiers. For
// each micro-batch size, the placement a memory budget gives a fine-tuning
// run (weights::plan_placement in training order, exactly as `finetune
// --mem-budget` makes it at load) and its predicted step (plan/train_plan.h):
// compute, layer reads, stall, overhead against the base resident; then the
// crossover past which the overhead stays below 5%. --disk-rate-cap plans
// for the disk finetune's reads are capped to (the smaller of it and the rate).
// --recompute off plans finetune --recompute off: the dense layers' backward
// without the rerun, and the intermediates' memory per micro-batch.

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cmd_plan.h"
#include "plan/train_plan.h"
#include "model/hparams.h"
#include "train/step_meter.h"
#include "train/train_step.h"
#include "weights/placement.h"
#include "weights/store_source.h"

namespace sluice::cli::plan_cmd {

using nlohmann::json;
namespace pl = sluice::plan;

int run_train(const PlanArgs& a) {
  if (!a.model.ends_with(".gguf")) {
    return fail(invalid_argument("plan train places a GGUF file as finetune streams it; give one with -m (`sluice "
                                 "synth` writes one at a preset's shape), not '{}'", a.model));
  }
  auto mf = open_model_file(a.model);
  if (!mf.ok()) return fail(mf.status());
  const ModelFile& file = *mf;
  const double total = static_cast<double>(file.total_tensor_bytes());
  if ((a.budget_gb > 0) == (a.budget_fraction > 0)) {
    return fail(invalid_argument("give the weights' memory budget as --budget-gb or as --budget-fraction of the "
                                 "model's {:.3f} GB (one of them)", total / 1e9));
  }
  if (a.budget_fraction > 1) return fail(invalid_argument("--budget-fraction is a share of the model (0 to 1)"));
  const auto budget = static_cast<uint64_t>(a.budget_gb > 0 ? a.budget_gb * 1e9 : a.budget_fraction * total);
  if (a.seq < 1 || a.train_tokens.empty()) return fail(invalid_argument("--seq and --tokens must be at least 1"));
  for (int64_t t : a.train_tokens) {
    if (t < 1) return fail(invalid_argument("--tokens must be at least 1, got {}", t));
  }

  // Rates: this machine's (the probes finetune's load runs), or given.
  double tflops = a.tflops, disk_gbps = a.disk_gbps;
  std::string rates_note = "given";
  if (a.calibrate) {
    auto cal = weights::calibrate_for_model(file, a.n_threads);
    if (!cal.ok()) return fail(cal.status());
    if (!(tflops > 0)) tflops = cal->matmul_tflops;
    if (!(disk_gbps > 0)) disk_gbps = cal->disk_read_gbps;
    rates_note = fmt::format("calibrated: {} matmul on the model's layer, {}", dtype_name(cal->matmul_type),
                             cal->disk_note);
  }
  // finetune --disk-rate-cap reads no faster than the cap: plan for that disk.
  if (a.disk_rate_cap > 0 && disk_gbps > a.disk_rate_cap / 1e9) {
    rates_note = fmt::format("capped at {:.4g} MB/s by --disk-rate-cap; the disk: {:.2f} GB/s, {}",
                             a.disk_rate_cap / 1e6, disk_gbps, rates_note);
    disk_gbps = a.disk_rate_cap / 1e9;
  }
  if (!(tflops > 0) || !(disk_gbps > 0)) {
    return fail(invalid_argument("plan train needs the compute and disk rates: --calibrate (this machine), or "
                                 "--tflops and --disk-gbps"));
  }
  auto work = train_workload(a.seq, a.rank, a.targets, "");
  if (!work.ok()) return fail(work.status());
  work->keep_activations = a.recompute == "off";
  auto hp = hparams_from_metadata(file.metadata);
  if (!hp.ok()) return fail(hp.status());

  std::string t = fmt::format("model     {}: {} of tensors\n", a.model, weights::format_bytes(total));
  t += fmt::format("rates     matmul {:.1f} GFLOP/s, disk {:.2f} GB/s ({})\n", tflops * 1e3, disk_gbps, rates_note);
  t += fmt::format("run       budget {} ({:.0f}% of the model); sequences of up to {} tokens, LoRA rank {} on {}\n",
                   weights::format_bytes(static_cast<double>(budget)), 100.0 * static_cast<double>(budget) / total,
                   a.seq, a.rank, a.targets);
  t += work->keep_activations
           ? "backward  the dense layers' intermediates kept (--recompute off): no rerun of their forward; memory "
             "beside the budget in the last column\n"
           : "backward  reruns each layer's forward from its input (--recompute on): no intermediates kept\n";
  t += fmt::format("\n{:>7} {:>3} {:>9} {:>6} {:>10} {:>11} {:>9} {:>9} {:>10} {:>9}  {:<7}{}\n", "tokens", "K",
                   "resident", "reads", "read", "compute", "disk", "turns", "step", "overhead", "bound",
                   work->keep_activations ? " kept" : "");
  json rows = json::array();
  weights::PlacementPlan last;
  int64_t last_tokens = 0;
  // The placement finetune would make for micro-batches of n tokens.
  auto plan_at = [&](int64_t n, pl::TrainVisitTimes* times) -> StatusOr<weights::PlacementPlan> {
    pl::TrainWorkload w = *work;
    w.seq_len = std::min(a.seq, n);
    ASSIGN_OR_RETURN(*times, pl::train_visit_times(file, w, n, tflops));
    return weights::plan_placement(file, {.mem_budget_bytes = budget,
                                          .disk_gbps = disk_gbps,
                                          .layer_compute_s = times->forward_s,
                                          .tokens_per_step = n,
                                          .head_compute_s = times->head_s,
                                          .training = true,
                                          .train_backward_s = times->backward_s});
  };
  for (int64_t n : a.train_tokens) {
    pl::TrainVisitTimes visit;
    auto p = plan_at(n, &visit);
    if (!p.ok()) return fail(p.status());
    const int64_t seq_len = std::min(a.seq, n);
    const pl::TrainStreamPlan& tp = p->train;
    // finetune keeps one set of intermediates a layer for the micro-batch's tokens.
    const double kept = work->keep_activations
                            ? static_cast<double>(TrainStep::kept_activation_bytes(*hp, n, std::max<int64_t>(1, a.rank)))
                            : 0.0;
    t += fmt::format("{:>7} {:>3} {:>9} {:>6} {:>10} {:>11} {:>9} {:>9} {:>10} {:>8.1f}%  {:<7}{}\n", n,
                     p->n_ring_slots, fmt::format("{}/{}", p->n_layer - p->n_streamed, p->n_layer), tp.layer_reads,
                     weights::format_bytes(tp.read_bytes), weights::format_seconds(tp.compute_s),
                     weights::format_seconds(tp.disk_s), weights::format_seconds(tp.boundary_s),
                     weights::format_seconds(tp.step_s), 100 * tp.overhead, pl::stream_bound_name(tp.bound),
                     work->keep_activations ? " " + weights::format_bytes(kept) : "");
    rows.push_back({{"tokens", n}, {"seq", seq_len}, {"n_ring_slots", p->n_ring_slots},
                    {"n_ring_slots_planned", p->n_ring_slots_planned}, {"n_streamed", p->n_streamed},
                    {"n_layer", p->n_layer}, {"layer_reads", tp.layer_reads}, {"read_bytes", tp.read_bytes},
                    {"forward_s", visit.forward_s}, {"backward_s", visit.backward_s}, {"head_s", visit.head_s},
                    {"compute_s", tp.compute_s}, {"disk_s", tp.disk_s}, {"boundary_s", tp.boundary_s},
                    {"step_s", tp.step_s}, {"stall_s", tp.stall_s}, {"overhead", tp.overhead},
                    {"bound", pl::stream_bound_name(tp.bound)}, {"kept_activation_bytes", kept}});
    last = std::move(*p);
    last_tokens = n;
  }
  // The crossover, from the largest micro-batch's plan (compute and the turns
  // scale with the tokens, the reads do not). A routed model's reads grow
  // with the tokens until each visit chooses every expert: searched, plan by
  // plan, for the fewest tokens at or under the overhead.
  const bool routed = last.n_expert_slots > 0;
  auto search = [&](double max_overhead) -> std::optional<double> {
    pl::TrainVisitTimes unused;
    auto over = [&](int64_t n) {
      auto p = plan_at(n, &unused);
      return p.ok() ? p->train.overhead : 1e30;
    };
    int64_t hi = 1;
    while (over(hi) > max_overhead) {
      if (hi > (int64_t{1} << 24)) return std::nullopt;
      hi *= 2;
    }
    int64_t lo = hi / 2;  // over(lo) > max_overhead, or lo == 0
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (over(mid) > max_overhead ? lo : hi) = mid;
    }
    return static_cast<double>(hi);
  };
  const std::optional<double> hide = routed ? search(0.0) : pl::tokens_for_overhead(last.train, last_tokens, 0.0);
  const std::optional<double> five = routed ? search(0.05) : pl::tokens_for_overhead(last.train, last_tokens, 0.05);
  auto tokens_text = [&](const std::optional<double>& x) {
    return x        ? fmt::format("{:.0f}", std::ceil(*x))
           : routed ? std::string("never (the pool cannot hold two layers' choices: every expert read stalls)")
                    : std::string("never (the turns alone exceed it)");
  };
  std::string row;
  for (const weights::LayerPlacement& l : last.layers) row += l.streamed ? 'S' : 'R';
  if (routed) {
    t += fmt::format("\nexperts   {} layers resident but their experts, read one by one into a pool of {} slots "
                     "of {} ({} experts in {} routed layers)\n",
                     row, last.n_expert_slots, weights::format_bytes(static_cast<double>(last.expert_slot_bytes)),
                     last.n_experts_total, last.n_layer_moe);
    t += "reads     each visit of a routed layer, forward and in the backward's recompute, reads the chosen experts "
         "it misses, a routed layer ahead (the forward's guessed from the rows below, the backward's as the forward "
         "routed): they hide behind their pass's compute when the pool holds two layers' choices, else they stall\n";
  } else {
    t += fmt::format("\nlayers    {} (R resident, S streamed), ring K = {} slots of {} (plan_stream on a forward "
                     "visit: K = {}); host buffer: none, the ring in RAM is the staging\n",
                     row, last.n_ring_slots, weights::format_bytes(static_cast<double>(last.slot_bytes)),
                     last.n_ring_slots_planned);
    t += fmt::format("reads     forward then backward: 2 x (S - K) = {} layer reads a micro-batch at any size "
                     "(the K streamed layers nearest each turn serve both passes)\n",
                     last.train.layer_reads);
  }
  t += fmt::format("crossover overhead below 5% {}; transfers wholly hidden {} (sequences of {})\n",
                   five ? "from " + tokens_text(five) + " tokens a micro-batch" : tokens_text(five),
                   hide ? "from " + tokens_text(hide) : tokens_text(hide), std::min(a.seq, last_tokens));
  auto opt = [](const std::optional<double>& x) { return x ? json(*x) : json(nullptr); };
  emit(a, json{{"model", a.model}, {"budget_bytes", budget}, {"compute_tflops", tflops}, {"disk_gbps", disk_gbps},
               {"recompute", a.recompute},
               {"disk_rate_cap_bytes_per_s", a.disk_rate_cap},
               {"layers", row}, {"n_expert_slots", last.n_expert_slots}, {"rows", rows}, {"tokens_overhead_5pct", opt(five)}, {"tokens_no_overhead", opt(hide)}},
       t);
  return 0;
}

}  // namespace sluice::cli::plan_cmd
