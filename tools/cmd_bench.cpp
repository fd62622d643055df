// sluice bench: prompt-processing (pp) and token-generation (tg) speed of one
// model on this machine, in llama-bench's terms, with the bytes each generated
// token reads and the fraction of this machine's measured bandwidth it achieves.
//
//   ppP  one forward pass over P tokens into an empty KV cache (logits of the
//        last token only), timed; P / seconds
//   tgN  N forward passes of one token each at positions 0 .. N-1 of an empty
//        KV cache, all timed; N / seconds (generation from an empty context)
// Token ids are pseudo-random in [0, n_vocab) from a fixed seed, so every run
// feeds the same ids. One untimed warm-up of each test, then -r repetitions;
// the median is the headline figure, min / max / stddev show the spread.
//
// Bytes read per generated token (decode is memory-bound):
//   Model::weight_bytes()                          every matrix + one embedding row
//   + 2 * n_layer * n_embd_kv * sizeof(float) * avg_ctx  f32 K and V rows read
//   avg_ctx = (N + 1) / 2: the step at position i attends to i + 1 rows.
// Prefill FLOPs of one prompt:
//   2 * P * n_layer * (layer matrix params)              q, k, v, o, gate, up, down
//   + 2 * n_vocab * n_embd                               output matrix, last token only
//   + 4 * n_layer * n_head * head_dim * P (P + 1) / 2    causal QK^T and AV
// The machine probes are plan/calibrate.h's (the decode roof: the GB/s the
// engine's batch-1 matmuls stream the model's layers at; the FLOP/s of the
// engine's matmuls over the model's layer at 64 tokens) run on the same thread
// count as the benchmark.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#ifdef SLUICE_HAVE_CUDA
#include "backend/cuda/cuda_api.h"
#endif
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_features.h"
#include "base/timer.h"
#include "bench/op_times.h"
#include "bench/stats.h"
#include "cli.h"
#include "model/op_profile.h"
#include "model_flags.h"
#include "plan/calibrate.h"

namespace sluice::cli {
namespace {

using nlohmann::ordered_json;

struct BenchArgs {
  ModelFlags m;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t n_ubatch = 512;
  int n_reps = 5;
  uint64_t seed = 42;
  bool json = false;
  bool no_repack = false;
  bool no_probe = false;
  bool op_times = false;
};

std::vector<int32_t> bench_tokens(int64_t n, int64_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);  // output sequence fixed by the standard
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
  return ids;
}

// Seconds of one prefill of `prompt` into an emptied cache.
StatusOr<double> time_prefill(Model& model, KvCache& kv, std::span<const int32_t> prompt, float* logits) {
  kv.clear();
  Stopwatch sw;
  RETURN_IF_ERROR(model.forward(prompt, kv, logits, /*all_logits=*/false, model.adapters().all()));
  return sw.seconds();
}

// Seconds of ids.size() single-token steps from an emptied cache.
StatusOr<double> time_generate(Model& model, KvCache& kv, std::span<const int32_t> ids, float* logits) {
  kv.clear();
  Stopwatch sw;
  for (const int32_t& id : ids)
    RETURN_IF_ERROR(model.forward(std::span<const int32_t>(&id, 1), kv, logits, false, model.adapters().all()));
  return sw.seconds();
}

// One test's operators (--op-times): n more passes with every operator timed
// (model/op_profile.h), merged by median, and the passes' median seconds.
struct OpTimes {
  std::vector<bench::OpTime> rows;
  double pass_seconds = 0;
};
template <class Pass>
StatusOr<OpTimes> profile_passes(Model& model, OpProfile& profile, int n, Pass pass) {
  std::vector<std::vector<bench::OpTime>> passes;
  std::vector<double> seconds;
  model.set_op_profile(&profile);
  for (int i = 0; i < n; ++i) {
    profile.clear();
    StatusOr<double> s = pass();
    if (!s.ok()) {
      model.set_op_profile(nullptr);
      return s.status();
    }
    seconds.push_back(*s);
    std::vector<bench::OpTime>& rows = passes.emplace_back();
    for (const OpProfile::Row& r : profile.rows())
      rows.push_back({.op = r.label, .calls = r.calls, .seconds = r.seconds, .flops = r.work.flops,
                      .bytes = r.work.bytes});
  }
  model.set_op_profile(nullptr);
  return OpTimes{.rows = bench::median_op_times(passes), .pass_seconds = bench::median(seconds)};
}

ordered_json op_times_json(const OpTimes& t) {
  ordered_json rows = ordered_json::array();
  for (const bench::OpTime& r : t.rows)
    rows.push_back({{"op", r.op}, {"calls", r.calls}, {"seconds", r.seconds}, {"flops", r.flops}, {"bytes", r.bytes}});
  return {{"pass_seconds", t.pass_seconds}, {"ops", rows}};
}

// llama.cpp's label for general.file_type, so the table reads like llama-bench's.
std::string type_label(const ModelFile& f) {
  if (auto ft = f.metadata.get_int("general.file_type")) {
    switch (*ft) {
      case 0: return "all F32";
      case 1: return "F16";
      case 2: return "Q4_0";
      case 7: return "Q8_0";
      case 14: return "Q4_K - Small";
      case 15: return "Q4_K - Medium";
      case 18: return "Q6_K";
      case 32: return "BF16";
      default: break;
    }
  }
  // Otherwise the type holding the most bytes.
  std::vector<std::pair<uint64_t, DType>> by_type;
  for (const TensorInfo& t : f.tensors) {
    auto it = std::find_if(by_type.begin(), by_type.end(), [&](const auto& p) { return p.second == t.type; });
    if (it == by_type.end()) by_type.push_back({t.n_bytes, t.type});
    else it->first += t.n_bytes;
  }
  if (by_type.empty()) return "?";
  return dtype_name(std::max_element(by_type.begin(), by_type.end())->second);
}

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  return fmt::format("{:.0f}", n);
}

ordered_json or_null(bool present, double v) { return present ? ordered_json(v) : ordered_json(nullptr); }

int run(const BenchArgs& a) {
  if (a.n_prompt <= 0) return fail(invalid_argument("-p must be > 0 (got {})", a.n_prompt));
  if (a.n_gen < 0) return fail(invalid_argument("-n must be >= 0 (got {})", a.n_gen));
  if (a.n_reps < 1) return fail(invalid_argument("-r must be >= 1 (got {})", a.n_reps));
  if (a.n_ubatch < 1) return fail(invalid_argument("--ubatch must be >= 1 (got {})", a.n_ubatch));

  std::optional<int> worker_exit;
  auto parallel = a.m.join(&worker_exit);
  if (!parallel.ok()) return fail(parallel.status());
  if (worker_exit) return *worker_exit;
  LoadOptions load = a.m.load_options();
  load.n_batch = std::min(a.n_prompt, a.n_ubatch);
  load.repack = !a.no_repack;
  auto lm = load_model_verbose(a.m.model, load, a.json, parallel->get());
  if (!lm.ok()) return fail(lm.status());
  const std::shared_ptr<const ModelFile>& file = lm->file;
  const std::shared_ptr<weights::StoreWeightSource>& stream = lm->stream;
  Model& model = *lm->model;
  const double load_s = lm->load_seconds;
  const ModelHparams& hp = model.hparams();
  const int64_t n_ctx = a.n_prompt + a.n_gen;
  if (hp.n_ctx_train > 0 && n_ctx > hp.n_ctx_train) {
    return fail(invalid_argument("-p {} + -n {} = {} tokens exceeds the model's context of {}", a.n_prompt, a.n_gen,
                                 n_ctx, hp.n_ctx_train));
  }

  KvCache kv = model.make_kv_cache(n_ctx);
  // Page-locked on a GPU, as the server's: each token's logits reach the host at the bus's rate.
  const std::unique_ptr<Buffer> logits_buf =
      model.backend().alloc_host(static_cast<size_t>(hp.n_vocab) * sizeof(float));
  float* logits = logits_buf->floats();
  const std::vector<int32_t> prompt = bench_tokens(a.n_prompt, hp.n_vocab, a.seed);
  const std::vector<int32_t> gen = bench_tokens(a.n_gen, hp.n_vocab, a.seed + 1);
  fmt::print(stderr, "[sluice] bench {}: loaded in {:.2f} s, {} threads, isa {}; pp{} tg{} x {} reps\n", a.m.model, load_s,
             model.n_threads(), cpu::isa_name(cpu::active_isa()), a.n_prompt, a.n_gen, a.n_reps);
  if (!model.repack_summary().empty()) fmt::print(stderr, "[sluice] weights: {}\n", model.repack_summary());
  if (model.adapters().size() > 0) fmt::print(stderr, "[sluice] {}\n", model.adapters().summary());

  // Warm-up (pages the weights in, settles the thread pool), then the timed repetitions.
  std::vector<double> pp_tps, tg_tps;
  uint64_t tg_streamed = 0;  // bytes of streamed weights copied during the timed generations
  for (int r = -1; r < a.n_reps; ++r) {
    auto pp_s = time_prefill(model, kv, prompt, logits);
    if (!pp_s.ok()) return fail(pp_s.status());
    if (r >= 0) pp_tps.push_back(static_cast<double>(a.n_prompt) / *pp_s);
    if (a.n_gen > 0) {
      const uint64_t streamed0 = model.backend().bytes_streamed();
      auto tg_s = time_generate(model, kv, gen, logits);
      if (!tg_s.ok()) return fail(tg_s.status());
      if (r >= 0) tg_streamed += model.backend().bytes_streamed() - streamed0;
      if (r >= 0) tg_tps.push_back(static_cast<double>(a.n_gen) / *tg_s);
    }
  }
  const bench::Spread pp = bench::spread_of(pp_tps);
  const bench::Spread tg = bench::spread_of(tg_tps);
  const bool has_tg = a.n_gen > 0;

  OpTimes pp_ops, tg_ops;  // --op-times: after the timed repetitions, so that they are not slowed
  if (a.op_times) {
    OpProfile profile(model.backend().op_clock());
    auto p_ops = profile_passes(model, profile, a.n_reps,
                                [&] { return time_prefill(model, kv, prompt, logits); });
    if (!p_ops.ok()) return fail(p_ops.status());
    pp_ops = *p_ops;
    if (has_tg) {
      auto t_ops = profile_passes(model, profile, a.n_reps,
                                  [&] { return time_generate(model, kv, gen, logits); });
      if (!t_ops.ok()) return fail(t_ops.status());
      tg_ops = *t_ops;
    }
  }

  // Bytes per generated token and prefill FLOPs (see the top of this file).
  const double avg_ctx = has_tg ? 0.5 * static_cast<double>(a.n_gen + 1) : 0.0;
  const double kv_row_bytes = 2.0 * static_cast<double>(hp.n_layer * hp.n_embd_kv()) * sizeof(float);
  const double weight_bytes = static_cast<double>(model.weight_bytes() + model.adapters().bytes());
  const double bytes_per_token = weight_bytes + kv_row_bytes * avg_ctx;
  const double achieved_gbps = bytes_per_token * tg.median / 1e9;
  const double layer_params = static_cast<double>(hp.n_embd * hp.n_embd_q() + 2 * hp.n_embd * hp.n_embd_kv() +
                                                  hp.n_embd_q() * hp.n_embd + 3 * hp.n_embd * hp.n_ff);
  const double matmul_params = static_cast<double>(hp.n_layer) * layer_params;
  const double p = static_cast<double>(a.n_prompt);
  const double pp_matmul_flops = 2.0 * p * matmul_params + 2.0 * static_cast<double>(hp.n_vocab * hp.n_embd);
  const double pp_attn_flops = 4.0 * static_cast<double>(hp.n_layer * hp.n_head * hp.head_dim) * p * (p + 1) / 2;
  const double pp_flops = pp_matmul_flops + pp_attn_flops;
  const double pp_gflops = pp_flops * pp.median / p / 1e9;

  std::optional<plan::Calibration> cal;
  double gpu_copy_gbps = 0;  // on a GPU the roof is its device-to-device copy bandwidth
  double gpu_h2d_gbps = 0;   // and streamed weights' is its pinned host-to-device copy
#ifdef SLUICE_HAVE_CUDA
  if (a.m.backend == "cuda" && !a.no_probe) {
    const cuda::CopyBandwidth bw = cuda::measure_copy_bandwidth();
    gpu_copy_gbps = bw.d2d_gbps;
    gpu_h2d_gbps = bw.h2d_pinned_gbps;
    fmt::print(stderr, "[sluice] {}: device copy {:.0f} GB/s (read + write), host to device {:.1f} GB/s pinned, "
               "{:.1f} GB/s pageable\n", cuda::device_description(), bw.d2d_gbps, bw.h2d_pinned_gbps,
               bw.h2d_pageable_gbps);
  }
#endif
  if (!a.no_probe && gpu_copy_gbps == 0) {
    auto c = plan::calibrate(plan::with_model_weights({.n_threads = model.n_threads(), .probe_disk = false}, *file));
    if (!c.ok()) return fail(c.status());
    cal = *c;
  }
  // How the backend launched the steps and what it copied in (a GPU's: CUDA graphs, streamed weights).
  if (const std::string copies = model.backend().copy_summary(); !copies.empty())
    fmt::print(stderr, "[sluice] {}\n", copies);
  const double machine_gbps = gpu_copy_gbps > 0 ? gpu_copy_gbps : cal ? cal->decode_read_gbps() : 0;
  const double machine_gflops = cal ? cal->matmul_tflops * 1e3 : 0;

  uint64_t n_params = 0;
  for (const TensorInfo& t : file->tensors) n_params += static_cast<uint64_t>(t.n_elements());
  const std::string name = file->metadata.get_string("general.name").value_or(a.m.model);
  const std::string type = type_label(*file);
  const char* isa = cpu::isa_name(cpu::active_isa());

  if (a.json) {
    ordered_json j;
    j["model"] = a.m.model;
    j["model_name"] = name;
    j["model_type"] = type;
    j["model_size"] = file->total_tensor_bytes();
    j["model_n_params"] = n_params;
    j["n_threads"] = model.n_threads();
    j["isa"] = isa;
    j["repacked_bytes"] = model.repacked_bytes();
    j["lora_bytes"] = model.adapters().bytes();  // included in weight_bytes
    if (stream) {
      const weights::WeightCountersSnapshot w = stream->store().counters();
      j["mem_budget_bytes"] = a.m.mem_budget;
      j["weights_disk_bytes_per_token"] = w.disk_bytes_per_token();
      j["weights_host_bytes_per_token"] = w.host_bytes_per_token();
      j["weights_stall_s"] = w.stall_s;
      j["weights_overlap_efficiency"] = w.overlap_efficiency();
      j["weights_resident_fraction"] = w.resident_fraction();
      j["weights_disk_in_flight_gbps"] = stream->store().arbiter_stats().in_flight_gbps();
      if (stream->store().streams_experts()) j["experts"] = stream->store().expert_stats().json(w);
    }
    j["pp_tokens"] = a.n_prompt;
    j["tg_tokens"] = a.n_gen;
    j["n_ubatch"] = std::min(a.n_prompt, a.n_ubatch);
    j["reps"] = a.n_reps;
    j["pp_tps"] = pp.median;
    j["pp_tps_min"] = pp.min;
    j["pp_tps_max"] = pp.max;
    j["pp_tps_stddev"] = pp.stddev;
    j["pp_tps_all"] = pp.all;
    j["tg_tps"] = or_null(has_tg, tg.median);
    j["tg_tps_min"] = or_null(has_tg, tg.min);
    j["tg_tps_max"] = or_null(has_tg, tg.max);
    j["tg_tps_stddev"] = or_null(has_tg, tg.stddev);
    j["tg_tps_all"] = tg.all;
    j["weight_bytes"] = model.weight_bytes();
    j["kv_avg_ctx"] = avg_ctx;
    j["bytes_per_token"] = bytes_per_token;
    j["achieved_gbps"] = or_null(has_tg, achieved_gbps);
    j["pp_flops"] = pp_flops;
    j["pp_matmul_flops"] = pp_matmul_flops;
    j["pp_gflops"] = pp_gflops;
    j["machine_read_gbps"] = or_null(machine_gbps > 0, machine_gbps);
    j["machine_matmul_gflops"] = or_null(cal.has_value(), machine_gflops);
    j["bw_fraction"] = or_null(machine_gbps > 0 && has_tg, achieved_gbps / machine_gbps);
    j["flops_fraction"] = or_null(cal.has_value(), pp_gflops / machine_gflops);
    if (a.op_times) {
      j["op_times"]["pp"] = op_times_json(pp_ops);
      if (has_tg) j["op_times"]["tg"] = op_times_json(tg_ops);
    }
    fmt::print("{}\n", j.dump(2));
    return 0;
  }

  const std::string size = human_bytes(file->total_tensor_bytes());
  const std::string params = human_count(static_cast<double>(n_params));
  fmt::print("| {:<24} | {:>10} | {:>9} | {:<13} | {:>7} | {:>6} | {:>10} | {:>8} | {:>10} | {:>10} |\n", "model", "size",
             "params", "type", "threads", "test", "t/s", "± sd", "min", "max");
  fmt::print("| {:-<24} | {:->10} | {:->9} | {:-<13} | {:->7} | {:->6} | {:->10} | {:->8} | {:->10} | {:->10} |\n", "", "",
             "", "", "", "", "", "", "", "");
  auto row = [&](const std::string& test, const bench::Spread& s) {
    fmt::print("| {:<24} | {:>10} | {:>9} | {:<13} | {:>7} | {:>6} | {:>10.2f} | {:>8.2f} | {:>10.2f} | {:>10.2f} |\n",
               name, size, params, type, model.n_threads(), test, s.median, s.stddev, s.min, s.max);
  };
  row(fmt::format("pp{}", a.n_prompt), pp);
  if (has_tg) row(fmt::format("tg{}", a.n_gen), tg);
  fmt::print("\nt/s: median of {} repetitions after one warm-up; isa {}\n", a.n_reps, isa);
  if (has_tg) {
    fmt::print("tg: {:.1f} MB read per token ({:.1f} MB weights{} + {:.2f} MB KV at avg context {:.1f}) -> {:.2f} GB/s",
               bytes_per_token / 1e6, weight_bytes / 1e6,
               model.adapters().size() > 0 ? fmt::format(", {:.2f} MB of it LoRA factors",
                                                         static_cast<double>(model.adapters().bytes()) / 1e6)
                                           : "",
               kv_row_bytes * avg_ctx / 1e6, avg_ctx, achieved_gbps);
    if (machine_gbps > 0)
      fmt::print(" = {:.1f}% of the measured {:.2f} GB/s {} (the decode roof)", 100 * achieved_gbps / machine_gbps,
                 machine_gbps, gpu_copy_gbps > 0 ? "device copy" : "weight read");
    fmt::print("\n");
  }
  if (has_tg && tg_streamed > 0) {
    const double per_token = static_cast<double>(tg_streamed) / static_cast<double>(a.n_gen * a.n_reps);
    fmt::print("tg: {:.1f} MB of streamed weights copied host to device per token -> {:.2f} GB/s", per_token / 1e6,
               per_token * tg.median / 1e9);
    if (gpu_h2d_gbps > 0)
      fmt::print(" = {:.1f}% of the measured {:.1f} GB/s pinned host-to-device copy (the streaming roof)",
                 100 * per_token * tg.median / 1e9 / gpu_h2d_gbps, gpu_h2d_gbps);
    fmt::print("\n");
  }
  if (lm->tiers) {  // three tiers: the measured rates held to the plan's (runtime/device_tiers.h)
    auto planned = replan_device_tiers(*lm->tiers, stream->store().plan().disk_gbps, a.n_prompt);
    if (planned.ok()) {
      fmt::print("tiers: pp{} {:.1f} t/s against {:.1f} planned ({:+.1f}%, bound {})", a.n_prompt, pp.median,
                 planned->prefill.tokens_per_s, 100 * (pp.median / planned->prefill.tokens_per_s - 1),
                 plan::stream_bound_name(planned->prefill.bound));
      if (has_tg)
        fmt::print("; tg {:.2f} t/s against {:.2f} planned ({:+.1f}%, bound {})", tg.median,
                   planned->decode.tokens_per_s, 100 * (tg.median / planned->decode.tokens_per_s - 1),
                   plan::stream_bound_name(planned->decode.bound));
      fmt::print("\n");
    }
  }
  fmt::print("pp: {:.2f} GFLOP per prompt ({:.1f}% attention) -> {:.2f} GFLOP/s", pp_flops / 1e9,
             100 * pp_attn_flops / pp_flops, pp_gflops);
  if (cal) {
    fmt::print(" = {:.1f}% of the measured {:.2f} GFLOP/s {} matmul", 100 * pp_gflops / machine_gflops, machine_gflops,
               dtype_name(cal->matmul_type));
  }
  fmt::print("\n");
  if (a.op_times) {
    const std::string clock = model.backend().host_visible() ? "the host's clock" : "the device's clock";
    const char* graphs = model.backend().host_visible() ? "" : ", no CUDA graphs while profiled";
    auto title = [&](const std::string& test) {
      return fmt::format("op times, {}: median of {} profiled passes, {}{}", test, a.n_reps, clock, graphs);
    };
    fmt::print("\n{}", bench::op_times_table(pp_ops.rows, {.title = title(fmt::format("pp{}", a.n_prompt)),
                                                          .per_label = "ms", .pass_seconds = pp_ops.pass_seconds,
                                                          .roof_gflops = machine_gflops}));
    if (has_tg) {
      fmt::print("\n{}", bench::op_times_table(tg_ops.rows, {.title = title(fmt::format("tg{}", a.n_gen)),
                                                            .per = static_cast<double>(a.n_gen),
                                                            .per_label = "ms/token",
                                                            .pass_seconds = tg_ops.pass_seconds,
                                                            .roof_gbps = machine_gbps}));
    }
  }
  if (stream) {
    const weights::WeightCountersSnapshot w = stream->store().counters();
    fmt::print("{}\n", w.summary());
    if (stream->store().streams_experts()) {
      const weights::ExpertStatsSnapshot ex = stream->store().expert_stats();
      fmt::print("{}\n{}", ex.per_token(w), ex.table());
    }
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "measure prompt (pp) and generation (tg) tokens/s, bytes per token, GB/s");
  a->m.add_to(c);
  c->add_option("-p,--n-prompt", a->n_prompt, "prompt tokens of the pp test")->capture_default_str();
  c->add_option("-n,--n-gen", a->n_gen, "generated tokens of the tg test (0: no tg test)")->capture_default_str();
  c->add_option("-r,--repetitions", a->n_reps, "timed repetitions of each test")->capture_default_str();
  c->add_option("-u,--ubatch", a->n_ubatch, "most prompt tokens per forward chunk (llama-bench's n_ubatch)")
      ->capture_default_str();
  c->add_option("--seed", a->seed, "seed of the pseudo-random token ids")->capture_default_str();
  c->add_flag("--json", a->json, "print one JSON object instead of the table");
  c->add_flag("--no-probe", a->no_probe, "skip the machine probes (read GB/s, matmul FLOP/s)");
  c->add_flag("--op-times", a->op_times,
              "after the timed tests, -r more passes of each with every operator timed (on a GPU by its own clock): "
              "a table of each operator's time, share and rates against the roofs");
  c->add_flag("--no-repack", a->no_repack, "keep Q4_0/Q8_0 matrices in GGUF row order (no interleaved repack at load, nor of streamed experts as they land)");
  return [a] { return run(*a); };
}

}  // namespace sluice::cli
