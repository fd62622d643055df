// sluice plan --measure: the performance model's predictions checked against
// the engine on this machine, in rounds of calibrate-then-measure (medians).

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli.h"
#include "cmd_plan.h"
#include "model/model.h"
#include "plan/calibrate.h"
#include "plan/measure_rounds.h"
#include "runtime/measure.h"
#include "weights/store_source.h"

namespace sluice::cli::plan_cmd {
namespace {

using nlohmann::json;
namespace pl = sluice::plan;

// Decode with weights streamed under a.budget_gb through the weight store,
// planned from the same calibration as the resident prediction.
struct StreamedDecode {
  weights::PlacementPlan plan;   // the store's placement: its prediction
  double measured_tps = 0;       // median per token
  // What the disk did during the timed tokens (the arbiter's counters): bytes
  // read per token, the rate while reads were in flight, and the share of the
  // wall time they were. For a disk-bound plan, measured / predicted is
  // (run_disk_gbps / the probe's rate) x disk_busy_fraction x (planned bytes / read bytes).
  double disk_bytes_per_token = 0;
  double run_disk_gbps = 0;      // 0: nothing was read
  double disk_busy_fraction = 0;
  // Experts streamed one by one (timed tokens): the share of chosen ones the
  // cache kept (no read since their layer last routed: the planner's hit
  // rate), and the share in memory when their layer routed.
  double expert_hit_rate = -1;
  double expert_ready_rate = -1;
};

StatusOr<StreamedDecode> measure_streamed_decode(const PlanArgs& a, std::shared_ptr<const ModelFile> file,
                                                const pl::Calibration& cal) {
  ASSIGN_OR_RETURN(LoadedModel lm, load_model_verbose(file->source_path,
                                                      {.n_threads = a.n_threads,
                                                       .mem_budget_bytes = static_cast<uint64_t>(a.budget_gb * 1e9),
                                                       .calibration = &cal},
                                                      a.json));
  const std::shared_ptr<weights::StoreWeightSource>& stream = lm.stream;
  StreamedDecode out{.plan = stream->store().plan()};
  const std::unique_ptr<Model>& model = lm.model;
  const int64_t n = std::max<int64_t>(4, a.measure_decode / 4);
  KvCache kv = model->make_kv_cache(n + 2);
  const std::unique_ptr<Buffer> logits_buf =
      model->backend().alloc_host(static_cast<size_t>(model->hparams().n_vocab) * sizeof(float));
  float* logits = logits_buf->floats();
  const int32_t first[1] = {1};
  RETURN_IF_ERROR(model->forward(first, kv, logits, false));  // fills the ring
  std::vector<double> per_token;
  const weights::ArbiterStats before = stream->store().arbiter_stats();
  const weights::ExpertLayerStats experts_before = stream->store().expert_stats().total();
  double wall_s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok[1] = {static_cast<int32_t>((i * 7919 + 11) % model->hparams().n_vocab)};
    Stopwatch sw;
    RETURN_IF_ERROR(model->forward(tok, kv, logits, false));
    per_token.push_back(sw.seconds());
    wall_s += per_token.back();
  }
  const weights::ArbiterStats after = stream->store().arbiter_stats();
  if (stream->store().streams_experts()) {
    const weights::ExpertLayerStats e = stream->store().expert_stats().total();
    const uint64_t chosen = e.chosen - experts_before.chosen;
    const auto share = [&](uint64_t n) { return chosen ? static_cast<double>(n) / static_cast<double>(chosen) : 0.0; };
    out.expert_hit_rate = share(e.kept - experts_before.kept);
    out.expert_ready_rate = share(e.ready - experts_before.ready);
  }
  const double bytes = static_cast<double>(after.total_bytes() - before.total_bytes());
  const double busy_s = after.busy_s - before.busy_s;
  out.disk_bytes_per_token = bytes / static_cast<double>(n);
  out.run_disk_gbps = busy_s > 0 ? bytes / busy_s / 1e9 : 0.0;
  out.disk_busy_fraction = wall_s > 0 ? std::min(1.0, busy_s / wall_s) : 0.0;
  std::sort(per_token.begin(), per_token.end());
  out.measured_tps = 1.0 / per_token[per_token.size() / 2];
  return out;
}

// One round of --measure: a fresh calibration and, right after it, the
// measurements it predicts, so both see the same seconds of the machine.
struct MeasureRound {
  pl::Calibration cal;
  pl::MeasureResult resident;
  std::optional<StreamedDecode> stream;  // with --budget-gb

  pl::RoundFigures decode() const { return {resident.decode_predicted.tokens_per_s, resident.decode_measured_tps}; }
  pl::RoundFigures decode_bandwidth() const { return {resident.decode_bandwidth_tps, resident.decode_measured_tps}; }
  pl::RoundFigures prefill() const { return {resident.prefill_predicted.tokens_per_s, resident.prefill_measured_tps}; }
  // Predicted by the store's own placement (the engine runs exactly that
  // plan): per step, compute of every layer at the calibrated rates, or the
  // streamed layers' reads at the model file's disk rate, whichever is longer.
  pl::RoundFigures streamed() const { return {1.0 / stream->plan.predicted_step_s(), stream->measured_tps}; }
  // The same plan at the disk rate the timed tokens actually got: the pipeline
  // model alone, with the disk's drift between probe and run taken out.
  pl::RoundFigures streamed_at_run_disk() const {
    const double gbps = stream->run_disk_gbps > 0 ? stream->run_disk_gbps : stream->plan.disk_gbps;
    return {1.0 / stream->plan.predicted_step_s_at(gbps), stream->measured_tps};
  }
  // Experts streamed one by one: the plan given the run's hit rate (and disk
  // rate), the planner's step time "under a budget given a hit rate".
  pl::RoundFigures streamed_at_run_hit_rate() const {
    const double gbps = stream->run_disk_gbps > 0 ? stream->run_disk_gbps : stream->plan.disk_gbps;
    return {1.0 / stream->plan.predicted_step_s_given(stream->expert_hit_rate, gbps), stream->measured_tps};
  }
};

template <typename Figures>
pl::RoundsSummary summarize(const std::vector<MeasureRound>& rounds, Figures figures) {
  std::vector<pl::RoundFigures> f;
  for (const MeasureRound& r : rounds) f.push_back(figures(r));
  return pl::summarize_rounds(f, kRoundTolerance);
}

template <typename Field>
double median_over(const std::vector<MeasureRound>& rounds, Field field) {
  std::vector<double> v;
  for (const MeasureRound& r : rounds) v.push_back(field(r));
  return pl::median(std::move(v));
}

// Round 1's calibration with every rate replaced by its median over the rounds.
pl::Calibration median_calibration(const std::vector<MeasureRound>& rounds) {
  pl::Calibration c = rounds.front().cal;
  c.mem_read_gbps = median_over(rounds, [](const MeasureRound& r) { return r.cal.mem_read_gbps; });
  c.weight_read_gbps = median_over(rounds, [](const MeasureRound& r) { return r.cal.weight_read_gbps; });
  c.matmul_tflops = median_over(rounds, [](const MeasureRound& r) { return r.cal.matmul_tflops; });
  c.disk_read_gbps = median_over(rounds, [](const MeasureRound& r) { return r.cal.disk_read_gbps; });
  return c;
}

json figures_json(const pl::RoundFigures& f) {
  return {{"predicted_tokens_per_s", f.predicted}, {"measured_tokens_per_s", f.measured}, {"ratio", f.ratio()}};
}

json summary_json(const pl::RoundsSummary& s) {
  return {{"predicted_tokens_per_s", s.predicted}, {"measured_tokens_per_s", s.measured}, {"ratio", s.ratio},
          {"n_within_tolerance", s.n_within}};
}

json placement_json(const weights::PlacementPlan& p) {
  return {{"n_layer", p.n_layer}, {"n_streamed", p.n_streamed}, {"n_ring_slots", p.n_ring_slots},
          {"slot_bytes", p.slot_bytes}, {"predicted_compute_s", p.predicted_compute_s},
          {"predicted_disk_s", p.predicted_disk_s}, {"predicted_step_s", p.predicted_step_s()},
          {"disk_gbps", p.disk_gbps}, {"file_probe_disk_gbps", p.sized_disk_gbps}};
}

json round_json(int index, const MeasureRound& r) {
  json j = {{"round", index},
            {"calibration", {{"mem_read_gbps", r.cal.mem_read_gbps}, {"weight_read_gbps", r.cal.weight_read_gbps},
                             {"decode_read_gbps", r.cal.decode_read_gbps()}, {"matmul_tflops", r.cal.matmul_tflops},
                             {"disk_read_gbps", r.cal.disk_read_gbps}}},
            {"decode", figures_json(r.decode())},
            {"prefill", figures_json(r.prefill())}};
  j["decode"]["bandwidth_bound_tokens_per_s"] = r.resident.decode_bandwidth_tps;
  j["decode"]["achieved_gbps"] = r.resident.decode_achieved_gbps;
  if (r.stream) {
    j["stream"] = figures_json(r.streamed());
    j["stream"].update(placement_json(r.stream->plan));
    j["stream"]["at_run_disk"] = figures_json(r.streamed_at_run_disk());
    j["stream"]["run_disk_gbps"] = r.stream->run_disk_gbps;
    j["stream"]["disk_busy_fraction"] = r.stream->disk_busy_fraction;
    j["stream"]["disk_bytes_per_token"] = r.stream->disk_bytes_per_token;
    if (r.stream->expert_hit_rate >= 0) {
      j["stream"]["expert_hit_rate"] = r.stream->expert_hit_rate;
      j["stream"]["expert_ready_rate"] = r.stream->expert_ready_rate;
    }
  }
  return j;
}

// Loads the model once, then --rounds times calibrates and measures; prints
// each round and the medians.
}  // namespace

int run_measure(const PlanArgs& a) {
  if (a.rounds < 1 || a.rounds > kMaxRounds)
    return fail(invalid_argument("--rounds must be between 1 and {}, got {}", kMaxRounds, a.rounds));
  auto m = pl::load_for_measure({.model_path = a.measure, .n_threads = a.n_threads, .n_prompt = a.measure_prompt,
                                 .n_decode = a.measure_decode});
  if (!m.ok()) return fail(m.status());
  std::vector<MeasureRound> rounds;
  for (int i = 0; i < a.rounds; ++i) {
    // Calibrate as the weight store does (the model's own layer and weight
    // type; the disk rate of the store's reads of the file), so the predictions
    // and the store's placement share one set of figures.
    auto cal = weights::calibrate_for_model(*m->file, a.n_threads);
    if (!cal.ok()) return fail(cal.status());
    if (!a.json) fmt::print(stderr, "[round {}/{}] {}", i + 1, a.rounds, calibration_text(*cal));
    auto r = pl::measure_loaded(*m, *cal);
    if (!r.ok()) return fail(r.status());
    MeasureRound round{.cal = *cal, .resident = *r};
    if (a.budget_gb > 0) {
      auto s = measure_streamed_decode(a, m->file, *cal);
      if (!s.ok()) return fail(s.status());
      round.stream = std::move(*s);
    }
    rounds.push_back(std::move(round));
  }
  const pl::MeasureResult& r0 = rounds.front().resident;
  const bool streamed = a.budget_gb > 0;
  std::string t = fmt::format("model     {}\n", pl::shape_summary(r0.shape));
  t += fmt::format("bytes     {:.3f} GB of weights per decode token (planner) = {:.3f} GB (engine), + {:.2f} MB KV at context {}\n\n",
                   r0.plan_weight_bytes / 1e9, r0.engine_weight_bytes / 1e9, r0.decode_predicted.kv_bytes / 1e6, r0.decode_ctx);

  // Each round: predicted, measured, measured/predicted.
  const std::string prefill_name = fmt::format("prefill tokens/s ({} tokens)", a.measure_prompt);
  const std::string stream_name = fmt::format("stream decode tokens/s ({:.2f} GB)", a.budget_gb);
  t += fmt::format("{:>5}   {:<31}   {:<31}{}\n", "", "decode tokens/s (roofline)", prefill_name,
                   streamed ? fmt::format("   {:<31}", stream_name) : "");
  auto triple = [](const pl::RoundFigures& f) {
    return fmt::format("{:>10.2f} {:>10.2f} {:>9.3f}", f.predicted, f.measured, f.ratio());
  };
  const std::string heads = fmt::format("{:>10} {:>10} {:>9}", "predicted", "measured", "meas/pred");
  t += fmt::format("{:>5}   {}   {}{}\n", "round", heads, heads, streamed ? "   " + heads : "");
  for (size_t i = 0; i < rounds.size(); ++i) {
    const MeasureRound& r = rounds[i];
    t += fmt::format("{:>5}   {}   {}{}\n", i + 1, triple(r.decode()), triple(r.prefill()),
                     streamed ? "   " + triple(r.streamed()) : "");
  }

  // The medians; measured/pred is the median of the rounds' own ratios.
  const pl::RoundsSummary decode = summarize(rounds, [](const MeasureRound& r) { return r.decode(); });
  const pl::RoundsSummary bandwidth = summarize(rounds, [](const MeasureRound& r) { return r.decode_bandwidth(); });
  const pl::RoundsSummary prefill = summarize(rounds, [](const MeasureRound& r) { return r.prefill(); });
  const pl::Calibration cal = median_calibration(rounds);
  t += fmt::format("\n{:<34} {:>12} {:>12} {:>16} {:>12}\n", fmt::format("median of {} rounds", rounds.size()),
                   "predicted", "measured", "measured/pred", fmt::format("within {:.0f}%", kRoundTolerance * 100));
  auto row = [&](const std::string& name, const pl::RoundsSummary& s) {
    t += fmt::format("{:<34} {:>12.2f} {:>12.2f} {:>16.3f} {:>12}\n", name, s.predicted, s.measured, s.ratio,
                     fmt::format("{} of {}", s.n_within, s.n_rounds));
  };
  row("decode tokens/s (roofline)", decode);
  row("decode tokens/s (bandwidth bound)", bandwidth);
  row(prefill_name, prefill);
  std::optional<pl::RoundsSummary> stream, stream_at_run_disk, stream_at_hit;
  if (streamed) {
    stream = summarize(rounds, [](const MeasureRound& r) { return r.streamed(); });
    stream_at_run_disk = summarize(rounds, [](const MeasureRound& r) { return r.streamed_at_run_disk(); });
    row(stream_name, *stream);
    row("  the same at the run's disk rate", *stream_at_run_disk);
    if (rounds.front().stream->expert_hit_rate >= 0) {
      stream_at_hit = summarize(rounds, [](const MeasureRound& r) { return r.streamed_at_run_hit_rate(); });
      row("  and at the run's expert hit rate", *stream_at_hit);
    }
  }
  t += fmt::format("\ndecode achieves {:.2f} GB/s of the {:.2f} GB/s roof ({}; memory read {:.2f}); prefill {:.2f} of "
                   "{:.2f} GFLOP/s (medians)\n",
                   median_over(rounds, [](const MeasureRound& r) { return r.resident.decode_achieved_gbps; }),
                   cal.decode_read_gbps(), cal.weight_read_gbps > 0 ? "weight read" : "memory read", cal.mem_read_gbps,
                   median_over(rounds, [](const MeasureRound& r) { return r.resident.prefill_achieved_tflops; }) * 1e3,
                   cal.matmul_tflops * 1e3);
  for (size_t i = 0; streamed && i < rounds.size(); ++i) {
    const weights::PlacementPlan& p = rounds[i].stream->plan;
    const StreamedDecode& sd = *rounds[i].stream;
    t += fmt::format("stream    round {}: {} of {} layers streamed through a ring of {} x {:.1f} MB; per step "
                     "compute {:.1f} ms, disk {:.1f} ms at {:.2f} GB/s ({}; {})\n",
                     i + 1, p.n_streamed, p.n_layer, p.n_ring_slots, p.slot_bytes / 1e6, p.predicted_compute_s * 1e3,
                     p.predicted_disk_s * 1e3, p.disk_gbps,
                     p.disk_note.empty() ? "the file probe"
                                         : fmt::format("the ring's own reads, file probe {:.2f}", p.sized_disk_gbps),
                     p.predicted_stall_s > 0 ? "disk-bound" : "transfers hidden");
    t += fmt::format("          timed tokens: {:.1f} MB read per token at {:.2f} GB/s while reads were in flight "
                     "({:.2f}x the predicted rate), in flight {:.0f}% of the time\n",
                     sd.disk_bytes_per_token / 1e6, sd.run_disk_gbps,
                     p.disk_gbps > 0 ? sd.run_disk_gbps / p.disk_gbps : 0.0, 100 * sd.disk_busy_fraction);
    if (sd.expert_hit_rate >= 0)
      t += fmt::format("          experts: {} slots, hit rate {:.1f}% measured ({:.1f}% planned), ready when routed "
                       "{:.1f}%\n",
                       p.n_expert_slots, 100 * sd.expert_hit_rate, 100 * p.expected_hit_rate,
                       100 * sd.expert_ready_rate);
  }
  if (streamed) {
    t += "stream    a disk-bound round's measured/pred = (run's disk rate / predicted rate) x (time in flight) x "
         "(planned / read bytes per token); the row at the run's disk rate takes out the first factor\n";
  }

  json j = {{"n_rounds", rounds.size()},
            {"tolerance", kRoundTolerance},
            {"calibration", calibration_json(cal)},
            {"decode", summary_json(decode)},
            {"prefill", summary_json(prefill)}};
  j["decode"]["bandwidth_bound_tokens_per_s"] = bandwidth.predicted;
  j["decode"]["achieved_gbps"] = median_over(rounds, [](const MeasureRound& r) { return r.resident.decode_achieved_gbps; });
  if (stream) {
    j["stream"] = summary_json(*stream);
    j["stream"]["budget_gb"] = a.budget_gb;
    j["stream"]["n_layer"] = rounds.front().stream->plan.n_layer;
    j["stream"]["at_run_disk"] = summary_json(*stream_at_run_disk);
    if (stream_at_hit) j["stream"]["at_run_hit_rate"] = summary_json(*stream_at_hit);
  }
  j["rounds"] = json::array();
  for (size_t i = 0; i < rounds.size(); ++i) j["rounds"].push_back(round_json(static_cast<int>(i) + 1, rounds[i]));
  emit(a, j, t);
  return 0;
}

}  // namespace sluice::cli::plan_cmd
