// sluice plan: the performance model as a tool (decode, kv, stream, spec, cost, tiers),
// calibrated on this machine (--calibrate) and checked against the engine (--measure).
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cmd_plan.h"
#include "model_flags.h"
#include "model/model.h"
#include "plan/calibrate.h"
#include "plan/deployment.h"
#include "plan/kv_plan.h"
#include "plan/expert_plan.h"
#include "plan/roofline.h"
#include "plan/speculative.h"
#include "plan/stream_plan.h"
#include "plan/units.h"

namespace sluice::cli {
namespace plan_cmd {

using nlohmann::json;
namespace pl = sluice::plan;

void emit(const PlanArgs& a, const json& j, const std::string& text) {
  if (a.json) fmt::print("{}\n", j.dump(2));
  else fmt::print("{}", text);
}

json calibration_json(const pl::Calibration& c) {
  return {{"n_threads", c.n_threads}, {"mem_read_gbps", c.mem_read_gbps}, {"weight_read_gbps", c.weight_read_gbps},
          {"decode_read_gbps", c.decode_read_gbps()}, {"matmul_type", dtype_name(c.matmul_type)},
          {"matmul_tflops", c.matmul_tflops}, {"matmul_model_layer", c.matmul_model_layer},
          {"matmul_n_tokens", c.matmul_n_tokens},
          {"matmul_curve", [&] {
             json pts = json::array();
             for (const pl::RatePoint& p : c.matmul_curve.points()) pts.push_back({{"n_tokens", p.n_tokens}, {"tflops", p.rate}});
             return pts;
           }()},
          {"disk_read_gbps", c.disk_read_gbps}, {"disk_direct", c.disk_direct}, {"disk_note", c.disk_note},
          {"mem_capacity_gb", c.mem_capacity_gb}};
}

std::string calibration_text(const pl::Calibration& c) {
  std::string curve;
  if (c.matmul_curve.points().size() > 1) {
    curve = "            matmul by rows at once:";
    for (const pl::RatePoint& p : c.matmul_curve.points()) curve += fmt::format(" {} {:.0f}", p.n_tokens, p.rate * 1e3);
    curve += " GFLOP/s\n";
  }
  const std::string roof = c.weight_read_gbps > 0
                               ? "decode roof = the weight read: the rate decode's own matmuls stream weights at"
                               : "decode roof = the memory read (no weight read probed)";
  return fmt::format(
      "calibration ({} threads): memory read {:.2f} GB/s (streaming sum), weight read {:.2f} GB/s (engine's batch-1 "
      "matmuls in decode's dispatches), {} matmul {:.2f} GFLOP/s ({} at {} tokens), disk read {:.2f} GB/s ({}), "
      "{:.1f} GB RAM\n"
      "{}"
      "            {}\n",
      c.n_threads, c.mem_read_gbps, c.weight_read_gbps, dtype_name(c.matmul_type), c.matmul_tflops * 1e3,
      c.matmul_model_layer ? "the model's layer dispatches" : "one matrix", c.matmul_n_tokens, c.disk_read_gbps,
      c.disk_note, c.mem_capacity_gb, curve, roof);
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

namespace {

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

}  // namespace

StatusOr<ModelInput> load_model_input(const PlanArgs& a) {
  ModelInput m;
  ASSIGN_OR_RETURN(pl::WeightFormat w, pl::parse_weight_format(a.weights));
  const std::string& spec = a.model;
  const bool hf = is_dir(spec) || (spec.size() >= 11 && spec.ends_with("config.json"));
  if (spec.ends_with(".gguf")) {
    ASSIGN_OR_RETURN(ModelFile mf, open_model_file(spec));
    ASSIGN_OR_RETURN(m.shape, pl::shape_from_model_file(mf));
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

namespace {

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
  if (a.kv_block < 1) return fail(invalid_argument("--kv-block must be >= 1, got {}", a.kv_block));
  const pl::ModelCost cost = pl::model_cost(m->shape, m->weights, *kvf);
  const pl::KvKept kept = pl::kv_tokens_kept(m->shape, a.ctx + 1, a.kv_block);
  std::string t = header(*m, *h);
  if (!kept.note.empty()) t += fmt::format("window    {}\n", kept.note);
  json j = {{"model", m->shape.name}, {"hardware", h->name}, {"ctx", a.ctx}, {"kv_bytes_per_token", cost.kv_bytes_per_token},
            {"kv_tokens_kept_per_seq", kept.n_tokens}, {"kv_window_note", kept.note}};
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
    const double resident = m->weights.total() + b * kept.n_tokens * cost.kv_bytes_per_token;
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
  if (a.kv_block < 1) return fail(invalid_argument("--kv-block must be >= 1, got {}", a.kv_block));
  const double per_token = pl::kv_bytes_per_token(m->shape, *kvf);
  std::string t = header(*m, *h);
  t += fmt::format("KV        {} bytes per token ({}); equals the weights at {:.0f} tokens of context\n", per_token,
                   kvf->name, pl::kv_break_even_ctx(m->shape, *kvf, m->weights.total()));
  const std::string window_note = pl::kv_tokens_kept(m->shape, 0, a.kv_block).note;
  if (!window_note.empty()) t += fmt::format("window    {}\n", window_note);
  t += "\n";
  json j = {{"model", m->shape.name}, {"kv_format", kvf->name}, {"kv_bytes_per_token", per_token},
            {"kv_block", a.kv_block}, {"kv_window_note", window_note}};
  t += fmt::format("{:>9}", "context");
  for (int64_t b : a.batches) t += fmt::format(" {:>12}", fmt::format("B={} GiB", b));
  t += fmt::format(" {:>10} {:>10}\n", "max batch", "KV kept");
  json rows = json::array();
  for (int64_t c : a.ctxs) {
    if (c < 1) return fail(invalid_argument("context lengths must be >= 1"));
    const pl::KvKept kept = pl::kv_tokens_kept(m->shape, c, a.kv_block);
    const double seq = pl::kv_bytes_per_seq(m->shape, *kvf, kept.n_tokens);
    t += fmt::format("{:>9}", c);
    json r = {{"ctx", c}, {"kv_bytes_per_seq", seq}, {"kv_tokens_kept", kept.n_tokens}};
    for (int64_t b : a.batches) t += fmt::format(" {:>12.2f}", b * seq / pl::kGiB);
    auto budget = pl::max_batch_for_budget({.memory_bytes = h->mem_capacity_gb * 1e9,
                                            .weight_bytes = static_cast<double>(m->weights.total()),
                                            .reserve_bytes = a.reserve_gb * 1e9, .kv_bytes_per_seq = seq});
    if (!budget.ok()) return fail(budget.status());
    t += fmt::format(" {:>10} {:>10}\n", budget->max_batch, kept.n_tokens);
    r["max_batch"] = budget->max_batch;
    r["kv_budget_bytes"] = budget->kv_budget_bytes;
    rows.push_back(r);
  }
  t += fmt::format("\nmax batch: ({:.0f} GB memory - {:.2f} GB weights - {:.2f} GB reserve) / KV per sequence; "
                   "KV kept: positions per sequence the engine keeps\n",
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
  t += fmt::format("{:<18} {:>6} {:>8} {:>9} {:>6} {:>11} {:>10} {:>9} {:>11} {:>9} {:>10}\n", "disk", "batch",
                   "slots", "distinct", "hit", "read GB", "compute ms", "disk ms", "boundary ms", "step ms", "tokens/s");
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
        t += fmt::format("{:<18} {:>6} {:>8} {:>9.1f} {:>5.0f}% {:>11.3f} {:>10.2f} {:>9.2f} {:>11.2f} {:>9.2f} {:>10.1f}\n",
                         disk->name, b, p->n_slots, p->distinct_per_layer, 100 * p->hit_rate, p->read_bytes / 1e9,
                         p->compute_s * 1e3, p->disk_s * 1e3, p->boundary_s * 1e3, p->step_s * 1e3, p->tokens_per_s);
      }
      rows.push_back({{"disk", disk->name}, {"batch", b}, {"fits", p->fits}, {"slots", p->n_slots},
                      {"distinct_per_layer", p->distinct_per_layer}, {"hit_rate", p->hit_rate},
                      {"read_bytes", p->read_bytes}, {"active_bytes", p->active_bytes}, {"compute_s", p->compute_s},
                      {"disk_s", p->disk_s}, {"boundary_s", p->boundary_s}, {"step_s", p->step_s}, {"tokens_per_s", p->tokens_per_s},
                      {"verdict", p->verdict}});
    }
  }
  t += "\nhit: experts of a step already in a slot (slots per routed layer / experts, uniform routing, unless given);\n"
       "distinct: experts a step's tokens choose per routed layer; step = max(compute, disk + boundary), the\n"
       "boundary being the last expert's compute and the output head, which no read can overlap (the next step's\n"
       "experts are known only once its tokens are)\n";
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




void hardware_flags(CLI::App* c, PlanArgs& a) {
  c->add_option("--hw", a.hw, "hardware profile (a100-80gb, h100, h200, rtx4090)")->capture_default_str();
  c->add_option("--mem-gbps", a.mem_gbps, "override memory bandwidth, GB/s");
  c->add_option("--tflops", a.tflops, "override peak compute, TFLOP/s");
  c->add_option("--memory-gb", a.memory_gb, "override memory capacity, GB");
}

void workload_flags(CLI::App* c, PlanArgs& a) {
  c->add_option("-m,--model", a.model, "preset, .gguf file, or HF config.json / folder")->capture_default_str();
  c->add_option("--weights", a.weights, "weight format (bf16, fp8, int4, q8_0, q4_k, nf4, bits:X, ...)")->capture_default_str();
  c->add_option("--kv", a.kv, "KV cache element format")->capture_default_str();
  hardware_flags(c, a);
  c->add_option("--batch", a.batches, "batch sizes")->delimiter(',');
  c->add_option("--ctx", a.ctx, "context length per sequence")->capture_default_str();
  c->add_option("--kv-block", a.kv_block, "KV block size in tokens (a window is kept in whole blocks)")->capture_default_str();
}

}  // namespace
}  // namespace plan_cmd

Runner add_plan(CLI::App& app) {
  using namespace plan_cmd;  // the command's pieces, above and in cmd_plan_measure.cpp
  auto a = std::make_shared<PlanArgs>();
  CLI::App* p = app.add_subcommand("plan", "performance model: decode, kv, stream, experts, train, tiers, spec, cost, parallel; --calibrate, --measure");
  p->fallthrough();  // plan-level flags may follow the subcommand name
  p->add_flag("--json", a->json, "print JSON");
  p->add_flag("--calibrate", a->calibrate, "probe this machine and use it as the hardware");
  p->add_option("--measure", a->measure, "run MODEL here: predicted vs measured decode, prefill, streaming");
  p->add_option("--budget-gb", a->budget_gb,
                "weight memory budget: --measure also predicts (the store's placement) and measures streamed decode; "
                "parallel: each rank's");
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

  CLI::App* train = p->add_subcommand("train", "fine-tuning over a streamed base: step time, overhead, crossover");
  train->add_option("-m,--model", a->model, ".gguf file (as finetune streams it)")->required();
  train->add_option("--tokens", a->train_tokens, "tokens per micro-batch (batch x seq)")->delimiter(',');
  train->add_option("--seq", a->seq, "tokens per sequence (attention)")->capture_default_str();
  train->add_option("--rank", a->rank, "LoRA rank")->capture_default_str();
  train->add_option("--targets", a->targets, "adapted matrices: q,k,v,o,gate,up,down or all")->capture_default_str();
  train->add_option("--recompute", a->recompute,
                    "on: the backward reruns each layer's forward (finetune under --mem-budget); off: the dense "
                    "layers' intermediates are kept (finetune --recompute off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  train->add_option("--budget-fraction", a->budget_fraction, "weight memory budget as a share of the model");
  train->add_option("--tflops", a->tflops, "compute rate, TFLOP/s (default with --calibrate: the matmul probe)");
  train->add_option("--disk-gbps", a->disk_gbps, "disk read rate, GB/s (default with --calibrate: the probe)");
  add_disk_rate_cap_option(train, &a->disk_rate_cap);  // the disk rate is then at most the cap, as finetune's reads

  CLI::App* spec = p->add_subcommand("spec", "speculative decoding speedup and best draft length");
  spec->add_option("--acceptance", a->acceptance, "acceptance rate")->capture_default_str();
  spec->add_option("--draft", a->draft, "draft length k")->capture_default_str();
  spec->add_option("--cost-ratio", a->cost_ratio, "draft time / target time")->capture_default_str();
  spec->add_option("--max-draft", a->max_draft, "largest k searched")->capture_default_str();

  CLI::App* cost = p->add_subcommand("cost", "dollars per million tokens");
  workload_flags(cost, *a);
  cost->add_option("--price-per-hour", a->price_per_hour, "hourly price, $");
  cost->add_option("--tokens-per-s", a->tokens_per_s, "sustained throughput (else predicted from the model)");

  CLI::App* parallel = p->add_subcommand(
      "parallel", "a job over processes (--parallel pp, ep or pp,ep): each rank's share and the step with its network leg");
  parallel->add_option("-m,--model", a->model, ".gguf file (as the job loads it)")->required();
  parallel->add_option("--parallel", a->parallel, "pp: layer ranges per rank; ep: experts per rank; pp,ep: stages of "
                       "--ep-size ranks, each stage's experts over its ranks")->required();
  parallel->add_option("--ranks", a->n_ranks, "processes of the job, alike")->capture_default_str();
  parallel->add_option("--ep-size", a->ep_size, "with --parallel pp,ep: ranks per pipeline stage (ranks = stages x it)");
  hardware_flags(parallel, *a);
  parallel->add_option("--link-us", a->link_us, "link to rank 0: latency, one way, microseconds")->capture_default_str();
  parallel->add_option("--link-gbps", a->link_gbps, "link to rank 0: bandwidth, one way, GB/s")->capture_default_str();
  parallel->add_option("--n-batch", a->n_batch, "tokens per prefill step")->capture_default_str();
  parallel->add_option("--ep-attention", a->ep_attention,
                       "ep: where attention runs: rank0, every (each rank, with a KV pool) or auto (the faster that fits)")
      ->capture_default_str();
  parallel->add_option("--disk-gbps", a->disk_gbps,
                       "each rank's disk read rate, GB/s, for a range beyond --budget-gb that streams (default: "
                       "--calibrate's probe, else 3.5)");

  CLI::App* tiers = add_tiers(p, *a);

  return [a, p, rounds, decode, kv, stream, experts, train, tiers, spec, cost, parallel]() {
    if (!a->measure.empty()) return run_measure(*a);  // calibrates in every round
    if (rounds->count() > 0) return fail(invalid_argument("--rounds goes with --measure"));
    if (train->parsed()) return run_train(*a);  // calibrates on the model itself
    if (tiers->parsed()) return run_tiers(*a);  // the GPU's rates are flags
    std::optional<pl::Calibration> cal;
    if (a->calibrate) {
      auto c = pl::calibrate({.n_threads = a->n_threads, .matmul_curve_tokens = pl::kMatmulCurveTokens});
      if (!c.ok()) return fail(c.status());
      cal = *c;
      const bool more = decode->parsed() || kv->parsed() || stream->parsed() || experts->parsed() || cost->parsed() ||
                        parallel->parsed();
      if (!a->json && more) fmt::print(stderr, "{}", calibration_text(*cal));
    }
    if (decode->parsed()) return run_decode(*a, cal);
    if (kv->parsed()) return run_kv(*a, cal);
    if (stream->parsed()) return run_stream(*a, cal);
    if (experts->parsed()) return run_experts(*a, cal);
    if (spec->parsed()) return run_spec(*a);
    if (cost->parsed()) return run_cost(*a, cal);
    if (parallel->parsed()) return run_parallel(*a, cal);
    if (cal) {
      emit(*a, calibration_json(*cal), calibration_text(*cal));
      return 0;
    }
    fmt::print("{}", p->help());
    return 0;
  };
}

}  // namespace sluice::cli
