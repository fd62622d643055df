#include "dist/job_start.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/meminfo.h"
#include "dist/fingerprint.h"
#include "dist/forward_probe.h"
#include "dist/link_probe.h"
#include "dist/protocol.h"
#include "model/hparams.h"
#include "weights/store_source.h"

namespace sluice::dist {
namespace {

// The share of available memory a rank without --mem-budget offers for weights.
constexpr double kAvailableShare = 0.9;

Fingerprint fingerprint_of(const json& j) {
  return Fingerprint{.version = j.at("version").get<std::string>(),
                     .binary_hash = j.at("binary_hash").get<uint64_t>(),
                     .model_hash = j.at("model_hash").get<uint64_t>(),
                     .model_bytes = j.at("model_bytes").get<uint64_t>()};
}

// [[rows, TFLOP/s], ...] as hello() sends the matmul probe's curve.
plan::RateCurve curve_of(const json& j) {
  std::vector<plan::RatePoint> points;
  for (const json& p : j) points.push_back({.n_tokens = p.at(0).get<int64_t>(), .rate = p.at(1).get<double>()});
  return plan::RateCurve(std::move(points));
}

json curve_json(const plan::RateCurve& c) {
  json j = json::array();
  for (const plan::RatePoint& p : c.points()) j.push_back({p.n_tokens, p.rate});
  return j;
}

plan::RankResources resources_of(const json& j) {
  return plan::RankResources{.host = j.at("host").get<std::string>(),
                             .mem_cap_bytes = j.at("mem_cap").get<uint64_t>(),
                             .budget_given = j.at("budget_given").get<bool>(),
                             .read_gbps = j.at("read_gbps").get<double>(),
                             .tflops = j.at("tflops").get<double>(),
                             .tflops_curve = curve_of(j.value("tflops_curve", json::array())),
                             .forward_curve = curve_of(j.value("forward_curve", json::array())),
                             .forward_curve_shared = curve_of(j.value("forward_curve_shared", json::array())),
                             .attention_pair_s = j.value("attention_pair_s", 0.0),
                             .forward_curve_streamed = curve_of(j.value("forward_curve_streamed", json::array())),
                             .n_threads = j.at("n_threads").get<int>(),
                             .disk_gbps = j.value("disk_gbps", 0.0)};
}

}  // namespace

StatusOr<json> hello(Comm& c, const std::string& path, const ModelFile& file, int n_threads, uint64_t mem_budget,
                     double disk_rate_cap, plan::Calibration* cal_out) {
  ASSIGN_OR_RETURN(const Fingerprint fp, fingerprint(path));
  // One rank at a time: ranks sharing a machine would otherwise measure each
  // other (decode runs the stages in turn, not together).
  std::vector<uint8_t> turn(1, 0);
  if (c.rank() > 0)
    RETURN_IF_ERROR(c.recv_message(c.rank() - 1, kTagTurn, &turn, "the turn to measure",
                                   c.timeout_s() * kLoadTimeoutFactor));
  plan::CalibrateOptions co{.n_threads = n_threads, .n_repeats = 3, .mem_bytes = 64ull << 20, .probe_disk = false,
                            .min_probe_seconds = 0.05};
  // The plan cuts steps into micro-batches of a few rows: the rate at those too.
  co.matmul_curve_tokens = plan::kMatmulCurveTokens;
  co = plan::with_model_weights(co, file);
  co.weight_read_bytes = std::min<uint64_t>(co.weight_read_bytes, 256ull << 20);
  ASSIGN_OR_RETURN(plan::Calibration cal, plan::calibrate(co));
  // A file the store cannot read by offset (not one GGUF, smaller than a
  // read) leaves the rate 0: the rank holds its range in memory or refuses it.
  if (mem_budget > 0 && file.format == "gguf") {
    if (Status st = weights::measure_store_reads(file, /*direct=*/true, &cal); !st.ok()) {
      fmt::print(stderr, "[sluice] rank {}: its disk was not measured ({}); its range must fit --mem-budget\n",
                 c.rank(), st.message());
      cal.disk_read_gbps = 0;
    }
  }
  // The engine's forward over a few of the model's layers at the row counts
  // a micro-batch may have (forward_probe.h), within what the rank may hold:
  // alone here, and below with every rank at once.
  const uint64_t available = meminfo_bytes("MemAvailable").value_or(0);
  const uint64_t mem_cap =
      mem_budget > 0 ? mem_budget : static_cast<uint64_t>(kAvailableShare * static_cast<double>(available));
  constexpr double kForwardSeconds = 0.08;
  ForwardRates alone;
  plan::RateCurve shared;
  std::unique_ptr<ForwardProbe> probe;
  auto not_timed = [&](const Status& st) {
    fmt::print(stderr, "[sluice] rank {}: its forward pass was not timed ({}); the plan takes its matmul rate\n",
               c.rank(), st.message());
    probe.reset();
    alone = {};
  };
  if (StatusOr<std::unique_ptr<ForwardProbe>> p = ForwardProbe::create(path, n_threads, mem_cap, kForwardProbeMaxRows);
      p.ok())
    probe = std::move(*p);
  else
    not_timed(p.status());
  // Under a budget the rank's range may stream: the file-order rate too.
  if (probe) {
    if (StatusOr<ForwardRates> r = probe->time_alone(mem_budget > 0, kForwardSeconds); r.ok()) alone = std::move(*r);
    else not_timed(r.status());
  }
  *cal_out = cal;  // as measured: a streaming load applies the cap itself (open_streaming)
  // What the planner sees: the disk as the rank's capped reads will find it (0: not measured).
  plan::Calibration planned = cal;
  if (cal.disk_read_gbps > 0) weights::apply_disk_rate_cap(planned, disk_rate_cap);
  if (c.rank() + 1 < c.size()) RETURN_IF_ERROR(c.send(c.rank() + 1, kTagTurn, turn.data(), 1, "the turn to measure"));
  // Then every rank at once, as a micro-batched step runs the stages: ranks
  // sharing a machine share its caches and memory bus. The last rank, done
  // measuring alone, starts the others.
  if (c.size() > 1) {
    const int last = c.size() - 1;
    if (c.rank() == last) {
      for (int r = 0; r < last; ++r) RETURN_IF_ERROR(c.send(r, kTagTurn, turn.data(), 1, "the shared probe's start"));
    } else {
      RETURN_IF_ERROR(c.recv_message(last, kTagTurn, &turn, "the shared probe's start",
                                     c.timeout_s() * kLoadTimeoutFactor));
    }
    if (probe) {
      if (StatusOr<plan::RateCurve> f = probe->curve(kForwardProbeRows, kForwardSeconds); f.ok()) shared = std::move(*f);
      else not_timed(f.status());
    }
  }
  probe.reset();
  return json{{"version", fp.version},
              {"binary_hash", fp.binary_hash},
              {"model_hash", fp.model_hash},
              {"model_bytes", fp.model_bytes},
              {"host", c.host()},
              {"mem_cap", mem_cap},
              {"budget_given", mem_budget > 0},
              {"read_gbps", cal.decode_read_gbps()},
              {"tflops", cal.matmul_tflops},
              {"tflops_curve", curve_json(cal.matmul_curve)},
              {"forward_curve", curve_json(alone.curve)},
              {"forward_curve_shared", curve_json(shared)},
              {"forward_curve_streamed", curve_json(alone.streamed)},
              {"attention_pair_s", alone.attention_pair_s},
              {"disk_gbps", planned.disk_read_gbps},
              {"n_threads", cal.n_threads}};
}

Status send_json(Comm& c, int dest, int tag, const json& j, const char* what) {
  const std::string s = j.dump();
  return c.send(dest, tag, s.data(), s.size(), what);
}

StatusOr<json> recv_json(Comm& c, int src, int tag, const char* what, double timeout) {
  std::vector<uint8_t> msg;
  RETURN_IF_ERROR(c.recv_message(src, tag, &msg, what, timeout));
  json j = json::parse(msg.begin(), msg.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return data_loss("rank {} sent a malformed {}", src, what);
  return j;
}

StatusOr<JobStart> gather_job(Comm& c, const std::string& path, const LoadOptions& o) {
  if (!o.loras.empty())
    return unimplemented("LoRA adapters are not supported across processes (--parallel) yet; drop --lora");
  JobStart job;
  ASSIGN_OR_RETURN(job.file, open_model_file(path));
  ASSIGN_OR_RETURN(job.hp, hparams_from_metadata(job.file.metadata));
  ASSIGN_OR_RETURN(const json mine,
                   hello(c, path, job.file, o.n_threads, o.mem_budget_bytes, o.disk_rate_cap_bytes_per_s, &job.cal));
  job.ranks.push_back(resources_of(mine));
  std::string refusal;
  for (int r = 1; r < c.size(); ++r) {
    ASSIGN_OR_RETURN(const json h, recv_json(c, r, kTagHello, "hello", c.timeout_s() * kLoadTimeoutFactor));
    if (const std::string why = fingerprint_mismatch(fingerprint_of(mine), fingerprint_of(h)); !why.empty())
      refusal += fmt::format("{}rank {} on {}: {}", refusal.empty() ? "" : "; ", r, h.at("host").get<std::string>(), why);
    job.ranks.push_back(resources_of(h));
  }
  ASSIGN_OR_RETURN(job.links, probe_links(c));
  if (!refusal.empty()) job.refusal = invalid_argument("the job's processes differ: {}", refusal);
  return job;
}

Status send_to_workers(Comm& c, int tag, const json& j, const char* what) {
  for (int r = 1; r < c.size(); ++r) RETURN_IF_ERROR(send_json(c, r, tag, j, what));
  return Status();
}

Status refuse_job(Comm& c, const Status& why) {
  RETURN_IF_ERROR(send_to_workers(c, kTagControl, {{"ok", false}, {"error", why.message()}}, "setup"));
  return why;
}

json setup_message(const LoadOptions& o) {
  return {{"ok", true},          {"n_batch", o.n_batch}, {"n_ctx_max", o.n_ctx_max}, {"ctx_cap", o.ctx_cap},
          {"max_seqs", o.max_seqs}, {"repack", o.repack}};
}

LoadOptions worker_load_options(const WorkerOptions& o, const json& setup) {
  return LoadOptions{.n_threads = o.n_threads,
                     .n_batch = setup.at("n_batch").get<int64_t>(),
                     .n_ctx_max = setup.at("n_ctx_max").get<int64_t>(),
                     .ctx_cap = setup.at("ctx_cap").get<int64_t>(),
                     .max_seqs = setup.at("max_seqs").get<int64_t>(),
                     .repack = setup.at("repack").get<bool>(),
                     .backend = o.backend};
}

void stream_under_budget(LoadOptions* lo, bool streams, uint64_t mem_budget, double disk_rate_cap,
                         const plan::Calibration* cal) {
  lo->mem_budget_bytes = streams ? mem_budget : 0;
  lo->disk_rate_cap_bytes_per_s = streams ? disk_rate_cap : 0;
  lo->calibration = streams ? cal : nullptr;
}

StatusOr<std::string> start_job(Comm& c, std::string failures) {
  for (int r = 1; r < c.size(); ++r) {
    ASSIGN_OR_RETURN(const json j, recv_json(c, r, kTagHello, "load result", c.timeout_s() * kLoadTimeoutFactor));
    if (!j.value("ok", false))
      failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", r, j.value("error", "?"));
  }
  RETURN_IF_ERROR(send_to_workers(c, kTagControl, {{"ok", failures.empty()}, {"error", failures}}, "start"));
  return failures;
}

Status report_load(Comm& c, const StatusOr<LoadedModel>& lm) {
  RETURN_IF_ERROR(send_json(c, 0, kTagHello,
                            {{"ok", lm.ok()}, {"error", lm.ok() ? "" : lm.status().message()}}, "load result"));
  ASSIGN_OR_RETURN(const json go, recv_json(c, 0, kTagControl, "start", c.timeout_s() * kLoadTimeoutFactor));
  if (!go.value("ok", false)) return unavailable("the job did not start: {}", go.value("error", "?"));
  return Status();
}

void stream_as_setup_says(LoadOptions* lo, const json& setup, int rank, const WorkerOptions& o,
                          const plan::Calibration* cal) {
  stream_under_budget(lo, setup.at("streams").at(static_cast<size_t>(rank)).get<bool>(), o.mem_budget_bytes,
                      o.disk_rate_cap_bytes_per_s, cal);
}

}  // namespace sluice::dist
