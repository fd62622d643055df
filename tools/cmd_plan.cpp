// sluice plan: the performance model as a tool (decode, kv, stream, spec, cost),
// calibrated on this machine (--calibrate) and checked against the engine (--measure).
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "cli.h"
#include "model/model.h"
#include "plan/calibrate.h"
#include "plan/deployment.h"
#include "plan/kv_plan.h"
#include "plan/expert_plan.h"
#include "runtime/measure.h"
#include "plan/measure_rounds.h"
#include "plan/roofline.h"
#include "plan/speculative.h"
#include "plan/stream_plan.h"
#include "plan/units.h"
#include "weights/store_source.h"

namespace sluice::cli {
namespace {

using nlohmann::json;
namespace pl = sluice::plan;

constexpr int kMaxRounds = 100;            // --rounds: more would take hours on a large model
constexpr double kRoundTolerance = 0.15;   // "within 15%": |measured / predicted - 1| <= this

struct PlanArgs {
  bool json = false;
  bool calibrate = false;
  std::string measure;
  double budget_gb = 0;
  int n_threads = 0;
  // Model and formats.
  std::string model = "llama-3-8b";
  std::string weights = "bf16";
  std::string kv = "f16";
  // Hardware.
  std::string hw = "h100";
  double mem_gbps = 0;
  double tflops = 0;
  double memory_gb = 0;
  // Workload.
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256};
  std::vector<int64_t> ctxs = {4096, 32768, 131072};
  int64_t ctx = 4096;
  int64_t prompt = 1024;
  int64_t measure_prompt = 128;
  int64_t measure_decode = 32;
  int rounds = 3;                  // --measure: calibrate-then-measure rounds (medians reported)
  int64_t chunk = 0;
  double reserve_gb = 0;
  double price_per_hour = 0;
  double tokens_per_s = 0;
  // Streaming.
  std::vector<std::string> disks = {"nvme-gen3", "nvme-gen4", "2x nvme-gen4", "2x nvme-gen5"};
  std::vector<std::string> links = {"pcie3", "pcie4", "pcie5"};
  double ram_gb = 32;
  double vram_gb = 24;
  double flops_per_param = 2;
  double layer_gb = 0;
  double layer_params = 0;
  double active_fraction = 1;
  int64_t layers = 0;
  std::optional<double> hit_rate;  // experts: measured hit rate (else the uniform estimate)
  // Speculative decoding.
  double acceptance = 0.8;
  int64_t draft = 5;
  double cost_ratio = 0.05;
  int64_t max_draft = 16;
};

struct ModelInput {
  pl::ModelShape shape;
  pl::WeightBytes weights;
  std::string weights_note;  // "exact, from the file" or the format used
};

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A preset name, a GGUF file (exact tensor bytes), or an HF config.json / folder.
StatusOr<ModelInput> load_model_input(const PlanArgs& a) {
  ModelInput m;
  ASSIGN_OR_RETURN(pl::WeightFormat w, pl::parse_weight_format(a.weights));
  const std::string& spec = a.model;
  const bool hf = is_dir(spec) || (spec.size() >= 11 && spec.ends_with("config.json"));
  if (spec.ends_with(".gguf")) {
    ASSIGN_OR_RETURN(ModelFile mf, open_model_file(spec));
    ASSIGN_OR_RETURN(m.shape, pl::shape_from_metadata(mf.metadata));
    if (m.shape.n_vocab == 0 && mf.find("token_embd.weight")) m.shape.n_vocab = mf.find("token_embd.weight")->ne[1];
    m.weights = pl::weight_bytes_of_file(mf, m.shape);
    m.weights_note = "exact tensor bytes of the file";
  } else if (hf) {
    const std::string path = is_dir(spec) ? spec + "/config.json" : spec;
    ASSIGN_OR_RETURN(std::string text, read_text(path));
    ASSIGN_OR_RETURN(m.shape, pl::shape_from_hf_config(text, path));
    m.weights = pl::weight_bytes(m.shape, pl::uniform_mix(w));
    m.weights_note = fmt::format("{} ({:.4g} bits/weight)", w.name, w.bits_per_weight());
  } else {
    ASSIGN_OR_RETURN(m.shape, pl::preset_shape(spec));
    m.weights = pl::weight_bytes(m.shape, pl::uniform_mix(w));
    m.weights_note = fmt::format("{} ({:.4g} bits/weight)", w.name, w.bits_per_weight());
  }
  return m;
}

StatusOr<pl::Hardware> load_hardware(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  pl::Hardware h;
  if (cal) {
    h = cal->as_hardware();
  } else {
    ASSIGN_OR_RETURN(h, pl::hardware_profile(a.hw));
  }
  if (a.mem_gbps > 0) h.mem_gbps = a.mem_gbps;
  if (a.tflops > 0) h.peak_tflops = a.tflops;
  if (a.memory_gb > 0) h.mem_capacity_gb = a.memory_gb;
  return h;
}

void emit(const PlanArgs& a, const json& j, const std::string& text) {
  if (a.json) fmt::print("{}\n", j.dump(2));
  else fmt::print("{}", text);
}

json step_json(const pl::StepEstimate& e) {
  return {{"n_seqs", e.n_seqs}, {"n_tokens", e.n_tokens}, {"weight_bytes", e.weight_bytes}, {"kv_bytes", e.kv_bytes},
          {"flops", e.flops}, {"memory_s", e.memory_s}, {"compute_s", e.compute_s}, {"step_s", e.step_s},
          {"intensity_flop_per_byte", e.intensity_flop_per_byte}, {"compute_bound", e.compute_bound},
          {"tokens_per_s", e.tokens_per_s}};
}

std::string header(const ModelInput& m, const pl::Hardware& h) {
  const pl::ParamCount p = pl::count_params(m.shape);
  std::string s = fmt::format("model     {}\n", pl::shape_summary(m.shape));
  s += fmt::format("params    {:.2f} B total, {:.2f} B active; weights {:.2f} GB ({})\n", p.total() / 1e9, p.active() / 1e9,
                   m.weights.total() / 1e9, m.weights_note);
  s += fmt::format("hardware  {}: {:.0f} GB/s, {:.3g} TFLOP/s, {:.0f} GB; ridge {:.1f} FLOP/byte = {:.1f} MAC/byte\n", h.name,
                   h.mem_gbps, h.peak_tflops, h.mem_capacity_gb, h.ridge_flop_per_byte(), h.ridge_mac_per_byte());
  return s;
}

int run_decode(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  auto m = load_model_input(a);
  if (!m.ok()) return fail(m.status());
  auto h = load_hardware(a, cal);
  if (!h.ok()) return fail(h.status());
  auto kvf = pl::parse_weight_format(a.kv);
  if (!kvf.ok()) return fail(kvf.status());
  if (a.ctx < 0 || a.prompt < 1) return fail(invalid_argument("--ctx must be >= 0 and --prompt >= 1"));
  const pl::ModelCost cost = pl::model_cost(m->shape, m->weights, *kvf);
  std::string t = header(*m, *h);
  json j = {{"model", m->shape.name}, {"hardware", h->name}, {"ctx", a.ctx}, {"kv_bytes_per_token", cost.kv_bytes_per_token}};
  const pl::StepEstimate pre = pl::prefill_step(cost, *h, a.prompt);
  t += fmt::format("TTFT      {:.1f} ms for a {}-token prompt ({}-bound, {:.0f} tokens/s)\n", pre.step_s * 1e3, a.prompt,
                   pre.compute_bound ? "compute" : "memory", pre.tokens_per_s);
  j["prefill"] = step_json(pre);
  if (a.chunk > 0) {
    const pl::ChunkedPrefill cp = pl::chunked_prefill(cost, *h, a.prompt, a.chunk);
    t += fmt::format("chunked   {} chunks of {} (last {}): TTFT {:.1f} ms\n", cp.n_chunks, a.chunk, cp.last_chunk_tokens,
                     cp.ttft_s * 1e3);
    j["chunked_prefill"] = {{"n_chunks", cp.n_chunks}, {"last_chunk_tokens", cp.last_chunk_tokens}, {"ttft_s", cp.ttft_s}};
  }
  const std::optional<int64_t> ridge = pl::batch_at_ridge(cost, *h, a.ctx);
  t += ridge ? fmt::format("ridge     decode turns compute-bound at batch {} (context {})\n", *ridge, a.ctx)
             : fmt::format("ridge     KV reads keep decode memory-bound at any batch (context {})\n", a.ctx);
  j["batch_at_ridge"] = ridge ? json(*ridge) : json(nullptr);
  t += fmt::format("\n{:>6} {:>11} {:>10} {:>9} {:>9} {:>10} {:>12} {:>7} {:>6}{}\n", "batch", "weights GB", "KV GB",
                   "mem ms", "comp ms", "TPOT ms", "tokens/s", "FLOP/B", "fits", a.price_per_hour > 0 ? "   $/1M tok" : "");
  json rows = json::array();
  for (int64_t b : a.batches) {
    if (b < 1) return fail(invalid_argument("batch sizes must be >= 1"));
    const pl::StepEstimate e = pl::decode_step(cost, *h, b, a.ctx);
    const double resident = m->weights.total() + b * (a.ctx + 1) * cost.kv_bytes_per_token;
    const bool fits = h->mem_capacity_gb <= 0 || resident <= h->mem_capacity_gb * 1e9;
    json r = step_json(e);
    r["fits"] = fits;
    std::string price;
    if (a.price_per_hour > 0) {
      const double usd = pl::cost_per_million_tokens(a.price_per_hour, e.tokens_per_s).value();
      price = fmt::format(" {:>11.3f}", usd);
      r["usd_per_million_tokens"] = usd;
    }
    t += fmt::format("{:>6} {:>11.2f} {:>10.2f} {:>9.2f} {:>9.2f} {:>10.2f} {:>12.1f} {:>7.1f} {:>6}{}\n", b,
                     e.weight_bytes / 1e9, e.kv_bytes / 1e9, e.memory_s * 1e3, e.compute_s * 1e3, e.step_s * 1e3,
                     e.tokens_per_s, e.intensity_flop_per_byte, fits ? "yes" : "NO", price);
    rows.push_back(r);
  }
  j["decode"] = rows;
  emit(a, j, t);
  return 0;
}

int run_kv(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  auto m = load_model_input(a);
  if (!m.ok()) return fail(m.status());
  auto h = load_hardware(a, cal);
  if (!h.ok()) return fail(h.status());
  auto kvf = pl::parse_weight_format(a.kv);
  if (!kvf.ok()) return fail(kvf.status());
  const double per_token = pl::kv_bytes_per_token(m->shape, *kvf);
  std::string t = header(*m, *h);
  t += fmt::format("KV        {} bytes per token ({}); equals the weights at {:.0f} tokens of context\n\n", per_token,
                   kvf->name, pl::kv_break_even_ctx(m->shape, *kvf, m->weights.total()));
  json j = {{"model", m->shape.name}, {"kv_format", kvf->name}, {"kv_bytes_per_token", per_token}};
  t += fmt::format("{:>9}", "context");
  for (int64_t b : a.batches) t += fmt::format(" {:>12}", fmt::format("B={} GiB", b));
  t += fmt::format(" {:>10}\n", "max batch");
  json rows = json::array();
  for (int64_t c : a.ctxs) {
    if (c < 1) return fail(invalid_argument("context lengths must be >= 1"));
    const double seq = pl::kv_bytes_per_seq(m->shape, *kvf, c);
    t += fmt::format("{:>9}", c);
    json r = {{"ctx", c}, {"kv_bytes_per_seq", seq}};
    for (int64_t b : a.batches) t += fmt::format(" {:>12.2f}", b * seq / pl::kGiB);
    auto budget = pl::max_batch_for_budget({.memory_bytes = h->mem_capacity_gb * 1e9,
                                            .weight_bytes = static_cast<double>(m->weights.total()),
                                            .reserve_bytes = a.reserve_gb * 1e9, .kv_bytes_per_seq = seq});
    if (!budget.ok()) return fail(budget.status());
    t += fmt::format(" {:>10}\n", budget->max_batch);
    r["max_batch"] = budget->max_batch;
    r["kv_budget_bytes"] = budget->kv_budget_bytes;
    rows.push_back(r);
  }
  t += fmt::format("\nmax batch: ({:.0f} GB memory - {:.2f} GB weights - {:.2f} GB reserve) / KV per sequence\n",
                   h->mem_capacity_gb, m->weights.total() / 1e9, a.reserve_gb);
  j["contexts"] = rows;
  emit(a, j, t);
  return 0;
}

// Expert streaming: per disk and batch, the pool the budget leaves, the hit
// rate, the experts read per step and the step time (plan/expert_plan.h).
int run_experts(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  auto m = load_model_input(a);
  if (!m.ok()) return fail(m.status());
  if (!m->shape.is_moe()) return fail(invalid_argument("{} is not a mixture-of-experts model", m->shape.name));
  auto h = load_hardware(a, cal);
  if (!h.ok()) return fail(h.status());
  const pl::ParamCount pc = pl::count_params(m->shape);
  std::string t = fmt::format("model     {}\n", pl::shape_summary(m->shape));
  t += fmt::format("weights   {:.2f} GB ({}), {:.2f} GB of routed experts; active per token {:.2f} B params\n",
                   m->weights.total() / 1e9, m->weights_note, m->weights.of(pl::TensorClass::kExperts) / 1e9,
                   pc.active() / 1e9);
  t += fmt::format("compute   {} ({:.0f} GB/s, {:.3g} TFLOP/s); budget {:.1f} GB for weights{}\n\n", h->name, h->mem_gbps,
                   h->peak_tflops, a.ram_gb, a.hit_rate ? fmt::format(", hit rate {:.0f}% (given)", 100 * *a.hit_rate) : "");
  t += fmt::format("{:<18} {:>6} {:>8} {:>9} {:>6} {:>11} {:>10} {:>9} {:>9} {:>10}\n", "disk", "batch", "slots",
                   "distinct", "hit", "read GB", "compute ms", "disk ms", "step ms", "tokens/s");
  json rows = json::array();
  for (const std::string& d : a.disks) {
    auto disk = pl::disk_profile(d);
    if (!disk.ok()) return fail(disk.status());
    for (int64_t b : a.batches) {
      auto p = pl::plan_expert_stream({.shape = m->shape, .weights = m->weights, .hw = *h, .disk_gbps = disk->gbps,
                                       .mem_budget_bytes = a.ram_gb * 1e9, .tokens_per_step = b,
                                       .hit_rate = a.hit_rate});
      if (!p.ok()) return fail(p.status());
      if (!p->fits) {
        t += fmt::format("{:<18} {:>6} {}\n", disk->name, b, p->verdict);
      } else {
        t += fmt::format("{:<18} {:>6} {:>8} {:>9.1f} {:>5.0f}% {:>11.3f} {:>10.2f} {:>9.2f} {:>9.2f} {:>10.1f}\n",
                         disk->name, b, p->n_slots, p->distinct_per_layer, 100 * p->hit_rate, p->read_bytes / 1e9,
                         p->compute_s * 1e3, p->disk_s * 1e3, p->step_s * 1e3, p->tokens_per_s);
      }
      rows.push_back({{"disk", disk->name}, {"batch", b}, {"fits", p->fits}, {"slots", p->n_slots},
                      {"distinct_per_layer", p->distinct_per_layer}, {"hit_rate", p->hit_rate},
                      {"read_bytes", p->read_bytes}, {"active_bytes", p->active_bytes}, {"compute_s", p->compute_s},
                      {"disk_s", p->disk_s}, {"step_s", p->step_s}, {"tokens_per_s", p->tokens_per_s},
                      {"verdict", p->verdict}});
    }
  }
  t += "\nhit: experts of a step already in a slot (slots per routed layer / experts, uniform routing, unless given);\n"
       "distinct: experts a step's tokens choose per routed layer; step = max(compute, disk)\n";
  emit(a, json{{"model", pl::shape_summary(m->shape)}, {"rows", rows}}, t);
  return 0;
}

int run_stream(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  pl::StreamGridInputs in{.flops_per_param = a.flops_per_param, .host_budget_bytes = a.ram_gb * 1e9,
                          .device_budget_bytes = a.vram_gb * 1e9};
  std::string t;
  if (a.layer_gb > 0 || a.layer_params > 0) {
    if (!(a.layer_gb > 0) || !(a.layer_params > 0) || a.layers < 1)
      return fail(invalid_argument("--layer-gb, --layer-params and --layers go together"));
    in.n_layer = a.layers;
    in.layer_bytes = a.layer_gb * 1e9;
    in.layer_active_params = a.layer_params * a.active_fraction;
  } else {
    auto m = load_model_input(a);
    if (!m.ok()) return fail(m.status());
    const pl::ParamCount p = pl::count_params(m->shape);
    in.n_layer = m->shape.n_layer;
    in.layer_bytes = m->weights.layer_bytes();
    in.layer_active_params = static_cast<double>(p.attention + p.ffn + p.experts_active + p.router) / m->shape.n_layer;
    t += fmt::format("model     {}\n", pl::shape_summary(m->shape));
  }
  auto h = load_hardware(a, cal);
  if (!h.ok()) return fail(h.status());
  in.compute_tflops = h->peak_tflops;
  for (const std::string& d : a.disks) {
    auto disk = pl::disk_profile(d);
    if (!disk.ok()) return fail(disk.status());
    in.disks.push_back(*disk);
  }
  for (const std::string& l : a.links) {
    auto link = pl::link_profile(l);
    if (!link.ok()) return fail(link.status());
    in.links.push_back(*link);
  }
  auto grid = pl::plan_stream_grid(in);
  if (!grid.ok()) return fail(grid.status());
  t += fmt::format("layers    {} x {:.3f} GB, {:.3g} active params each, {} FLOPs/param, {} at {:.3g} TFLOP/s\n",
                   in.n_layer, in.layer_bytes / 1e9, in.layer_active_params, in.flops_per_param, h->name, in.compute_tflops);
  t += fmt::format("budgets   host buffer {:.0f} GB, ring {:.0f} GB; cell = min tokens/step that fits (step time); "
                   "hide = tokens for zero overhead\n\n",
                   a.ram_gb, a.vram_gb);
  t += fmt::format("{:<16}", "disk \\ link");
  for (const pl::Link& l : in.links) t += fmt::format(" {:>26}", fmt::format("{} ({:.0f} GB/s)", l.name, l.gbps));
  t += "\n";
  json cells = json::array();
  for (size_t i = 0; i < grid->size(); ++i) {
    const pl::StreamGridCell& c = (*grid)[i];
    if (i % in.links.size() == 0) t += fmt::format("{:<16}", fmt::format("{} ({:g})", c.disk.name, c.disk.gbps));
    std::string cell = "n/a";
    if (c.applicable)
      cell = c.min_tokens ? fmt::format("{} ({:.1f}s) hide {:.0f}", *c.min_tokens, c.plan.step_s, c.tokens_no_overhead)
                          : "none fits";
    t += fmt::format(" {:>26}", cell);
    if (i % in.links.size() + 1 == in.links.size()) t += "\n";
    json jc = {{"disk", c.disk.name}, {"disk_gbps", c.disk.gbps}, {"link", c.link.name}, {"link_gbps", c.link.gbps},
               {"applicable", c.applicable}, {"tokens_no_overhead", c.tokens_no_overhead}};
    if (c.min_tokens) {
      jc["min_tokens"] = *c.min_tokens;
      jc["plan"] = {{"compute_s", c.plan.compute_s}, {"transfer_s", c.plan.transfer_s}, {"disk_s", c.plan.disk_s},
                    {"n_ring_slots", c.plan.n_ring_slots}, {"ring_bytes", c.plan.ring_bytes},
                    {"host_buffer_bytes", c.plan.host_buffer_bytes}, {"step_s", c.plan.step_s},
                    {"bound", pl::stream_bound_name(c.plan.bound)}, {"verdict", c.plan.verdict}};
    }
    cells.push_back(jc);
  }
  emit(a, json{{"n_layer", in.n_layer}, {"layer_bytes", in.layer_bytes}, {"grid", cells}}, t);
  return 0;
}

int run_spec(const PlanArgs& a) {
  json j;
  std::string t;
  for (pl::AcceptanceModel model : {pl::AcceptanceModel::kGeometric, pl::AcceptanceModel::kLinear}) {
    auto e = pl::spec_estimate({.acceptance = a.acceptance, .draft_len = a.draft, .cost_ratio = a.cost_ratio, .model = model});
    if (!e.ok()) return fail(e.status());
    t += fmt::format("{:<9} k={} a={} r={}: {:.2f} tokens per round for {:.2f} target passes = {:.2f}x\n",
                     pl::acceptance_model_name(model), a.draft, a.acceptance, a.cost_ratio, e->tokens_per_round,
                     e->cost_target_passes, e->speedup);
    j[pl::acceptance_model_name(model)] = {{"tokens_per_round", e->tokens_per_round},
                                           {"cost_target_passes", e->cost_target_passes}, {"speedup", e->speedup}};
  }
  auto best = pl::best_draft_length(a.acceptance, a.cost_ratio, a.max_draft);
  if (!best.ok()) return fail(best.status());
  t += fmt::format("best draft length (geometric, k <= {}): {} -> {:.2f}x\n  k:", a.max_draft, best->best.draft_len,
                   best->best.speedup);
  json curve = json::array();
  for (const pl::SpecEstimate& e : best->curve) {
    t += fmt::format(" {}={:.2f}", e.draft_len, e.speedup);
    curve.push_back(e.speedup);
  }
  t += "\n";
  j["best_draft_len"] = best->best.draft_len;
  j["curve"] = curve;
  emit(a, j, t);
  return 0;
}

int run_cost(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  if (!(a.price_per_hour > 0)) return fail(invalid_argument("--price-per-hour is required"));
  double tps = a.tokens_per_s;
  std::string t;
  if (!(tps > 0)) {
    auto m = load_model_input(a);
    if (!m.ok()) return fail(m.status());
    auto h = load_hardware(a, cal);
    if (!h.ok()) return fail(h.status());
    auto kvf = pl::parse_weight_format(a.kv);
    if (!kvf.ok()) return fail(kvf.status());
    const int64_t b = a.batches.empty() ? 1 : a.batches.back();
    tps = pl::decode_step(pl::model_cost(m->shape, m->weights, *kvf), *h, b, a.ctx).tokens_per_s;
    t += fmt::format("{} on {} at batch {} (context {}): {:.1f} tokens/s predicted\n", m->shape.name, h->name, b, a.ctx, tps);
  }
  auto usd = pl::cost_per_million_tokens(a.price_per_hour, tps);
  if (!usd.ok()) return fail(usd.status());
  t += fmt::format("${:.2f}/hour at {:.1f} tokens/s: ${:.2f} per million tokens\n", a.price_per_hour, tps, *usd);
  emit(a, json{{"price_per_hour", a.price_per_hour}, {"tokens_per_s", tps}, {"usd_per_million_tokens", *usd}}, t);
  return 0;
}

json calibration_json(const pl::Calibration& c) {
  return {{"n_threads", c.n_threads}, {"mem_read_gbps", c.mem_read_gbps}, {"weight_read_gbps", c.weight_read_gbps},
          {"decode_read_gbps", c.decode_read_gbps()}, {"matmul_type", dtype_name(c.matmul_type)},
          {"matmul_tflops", c.matmul_tflops}, {"matmul_model_layer", c.matmul_model_layer},
          {"matmul_n_tokens", c.matmul_n_tokens},
          {"disk_read_gbps", c.disk_read_gbps}, {"disk_direct", c.disk_direct}, {"disk_note", c.disk_note},
          {"mem_capacity_gb", c.mem_capacity_gb}};
}

std::string calibration_text(const pl::Calibration& c) {
  const std::string roof = c.weight_read_gbps > 0
                               ? "decode roof = the weight read: the rate decode's own matmuls stream weights at"
                               : "decode roof = the memory read (no weight read probed)";
  return fmt::format(
      "calibration ({} threads): memory read {:.2f} GB/s (streaming sum), weight read {:.2f} GB/s (engine's batch-1 "
      "matmuls in decode's dispatches), {} matmul {:.2f} GFLOP/s ({} at {} tokens), disk read {:.2f} GB/s ({}), "
      "{:.1f} GB RAM\n"
      "            {}\n",
      c.n_threads, c.mem_read_gbps, c.weight_read_gbps, dtype_name(c.matmul_type), c.matmul_tflops * 1e3,
      c.matmul_model_layer ? "the model's layer dispatches" : "one matrix", c.matmul_n_tokens, c.disk_read_gbps,
      c.disk_note, c.mem_capacity_gb, roof);
}

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
  double expert_hit_rate = -1;   // experts streamed one by one: share of chosen ones in a slot (timed tokens)
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
  std::vector<float> logits(static_cast<size_t>(model->hparams().n_vocab));
  const int32_t first[1] = {1};
  RETURN_IF_ERROR(model->forward(first, kv, logits.data(), false));  // fills the ring
  std::vector<double> per_token;
  const weights::ArbiterStats before = stream->store().arbiter_stats();
  const weights::ExpertLayerStats experts_before = stream->store().expert_stats().total();
  double wall_s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok[1] = {static_cast<int32_t>((i * 7919 + 11) % model->hparams().n_vocab)};
    Stopwatch sw;
    RETURN_IF_ERROR(model->forward(tok, kv, logits.data(), false));
    per_token.push_back(sw.seconds());
    wall_s += per_token.back();
  }
  const weights::ArbiterStats after = stream->store().arbiter_stats();
  if (stream->store().streams_experts()) {
    const weights::ExpertLayerStats e = stream->store().expert_stats().total();
    const uint64_t chosen = e.chosen - experts_before.chosen;
    out.expert_hit_rate = chosen ? static_cast<double>(e.ready - experts_before.ready) / static_cast<double>(chosen) : 0.0;
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
  }
  return j;
}

// Loads the model once, then --rounds times calibrates and measures; prints
// each round and the medians.
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
      t += fmt::format("          experts: {} slots, hit rate {:.1f}% measured ({:.1f}% planned before prediction)\n",
                       p.n_expert_slots, 100 * sd.expert_hit_rate, 100 * p.expected_hit_rate);
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

void workload_flags(CLI::App* c, PlanArgs& a) {
  c->add_option("-m,--model", a.model, "preset, .gguf file, or HF config.json / folder")->capture_default_str();
  c->add_option("--weights", a.weights, "weight format (bf16, fp8, int4, q8_0, q4_k, nf4, bits:X, ...)")->capture_default_str();
  c->add_option("--kv", a.kv, "KV cache element format")->capture_default_str();
  c->add_option("--hw", a.hw, "hardware profile (a100-80gb, h100, h200, rtx4090)")->capture_default_str();
  c->add_option("--mem-gbps", a.mem_gbps, "override memory bandwidth, GB/s");
  c->add_option("--tflops", a.tflops, "override peak compute, TFLOP/s");
  c->add_option("--memory-gb", a.memory_gb, "override memory capacity, GB");
  c->add_option("--batch", a.batches, "batch sizes")->delimiter(',');
  c->add_option("--ctx", a.ctx, "context length per sequence")->capture_default_str();
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* p = app.add_subcommand("plan", "performance model: decode, kv, stream, spec, cost; --calibrate, --measure");
  p->fallthrough();  // plan-level flags may follow the subcommand name
  p->add_flag("--json", a->json, "print JSON");
  p->add_flag("--calibrate", a->calibrate, "probe this machine and use it as the hardware");
  p->add_option("--measure", a->measure, "run MODEL here: predicted vs measured decode, prefill, streaming");
  p->add_option("--budget-gb", a->budget_gb,
                "weight memory budget: --measure also predicts (the store's placement) and measures streamed decode");
  p->add_option("-t,--threads", a->n_threads, "threads for probes and --measure");
  p->add_option("--prompt", a->prompt, "prompt tokens for TTFT")->capture_default_str();
  p->add_option("--measure-prompt", a->measure_prompt, "prompt tokens --measure prefills")->capture_default_str();
  p->add_option("--measure-decode", a->measure_decode, "decode steps --measure times (median)")->capture_default_str();
  CLI::Option* rounds = p->add_option("--rounds", a->rounds,
                                      fmt::format("--measure: rounds of calibrate-then-measure, medians reported (1 to {})",
                                                  kMaxRounds))
                            ->capture_default_str();

  CLI::App* decode = p->add_subcommand("decode", "TTFT, then a batch sweep of TPOT and throughput");
  workload_flags(decode, *a);
  decode->add_option("--chunk", a->chunk, "also plan chunked prefill with chunks of this many tokens");
  decode->add_option("--price-per-hour", a->price_per_hour, "add $ per million tokens");

  CLI::App* kv = p->add_subcommand("kv", "KV memory by context and batch, and the max batch for the memory");
  workload_flags(kv, *a);
  kv->add_option("--ctxs", a->ctxs, "context lengths")->delimiter(',');
  kv->add_option("--reserve-gb", a->reserve_gb, "memory kept for activations and runtime");

  CLI::App* stream = p->add_subcommand("stream", "streaming grid: min tokens per step for each disk and link");
  workload_flags(stream, *a);
  stream->add_option("--disks", a->disks, "disks (nvme-gen3, 2x nvme-gen4, ...)")->delimiter(',');
  stream->add_option("--links", a->links, "links (pcie3, pcie4, pcie5, nvlink)")->delimiter(',');
  stream->add_option("--ram-gb", a->ram_gb, "host buffer budget, GB")->capture_default_str();
  stream->add_option("--vram-gb", a->vram_gb, "ring budget in the compute tier, GB")->capture_default_str();
  stream->add_option("--flops-per-param", a->flops_per_param, "2 for inference, 6 for training")->capture_default_str();
  stream->add_option("--layer-gb", a->layer_gb, "bytes per layer, GB (instead of -m)");
  stream->add_option("--layer-params", a->layer_params, "params per layer (instead of -m)");
  stream->add_option("--active-fraction", a->active_fraction, "share of --layer-params doing FLOPs (MoE)");
  stream->add_option("--layers", a->layers, "layer count (instead of -m)");

  CLI::App* experts = p->add_subcommand("experts", "MoE under a memory budget: expert slots, hit rate, reads, step time");
  workload_flags(experts, *a);
  experts->add_option("--disks", a->disks, "disks (nvme-gen3, 2x nvme-gen4, ...)")->delimiter(',');
  experts->add_option("--ram-gb", a->ram_gb, "memory for weights, GB")->capture_default_str();
  experts->add_option("--hit-rate", a->hit_rate, "share of chosen experts already in a slot (default: uniform routing)");

  CLI::App* spec = p->add_subcommand("spec", "speculative decoding speedup and best draft length");
  spec->add_option("--acceptance", a->acceptance, "acceptance rate")->capture_default_str();
  spec->add_option("--draft", a->draft, "draft length k")->capture_default_str();
  spec->add_option("--cost-ratio", a->cost_ratio, "draft time / target time")->capture_default_str();
  spec->add_option("--max-draft", a->max_draft, "largest k searched")->capture_default_str();

  CLI::App* cost = p->add_subcommand("cost", "dollars per million tokens");
  workload_flags(cost, *a);
  cost->add_option("--price-per-hour", a->price_per_hour, "hourly price, $");
  cost->add_option("--tokens-per-s", a->tokens_per_s, "sustained throughput (else predicted from the model)");

  return [a, p, rounds, decode, kv, stream, experts, spec, cost]() {
    if (!a->measure.empty()) return run_measure(*a);  // calibrates in every round
    if (rounds->count() > 0) return fail(invalid_argument("--rounds goes with --measure"));
    std::optional<pl::Calibration> cal;
    if (a->calibrate) {
      auto c = pl::calibrate({.n_threads = a->n_threads});
      if (!c.ok()) return fail(c.status());
      cal = *c;
      const bool more = decode->parsed() || kv->parsed() || stream->parsed() || experts->parsed() || cost->parsed();
      if (!a->json && more) fmt::print(stderr, "{}", calibration_text(*cal));
    }
    if (decode->parsed()) return run_decode(*a, cal);
    if (kv->parsed()) return run_kv(*a, cal);
    if (stream->parsed()) return run_stream(*a, cal);
    if (experts->parsed()) return run_experts(*a, cal);
    if (spec->parsed()) return run_spec(*a);
    if (cost->parsed()) return run_cost(*a, cal);
    if (cal) {
      emit(*a, calibration_json(*cal), calibration_text(*cal));
      return 0;
    }
    fmt::print("{}", p->help());
    return 0;
  };
}

}  // namespace sluice::cli
