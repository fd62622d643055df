// sluice plan tiers: weights over a GPU's three tiers (HBM, pinned host RAM,
// the model file read with O_DIRECT) from --gpu-budget and --mem-budget and
// four rates (plan/tier_plan.h): which layers or experts sit where, the HBM
// ring and the host's staging, and decode and prefill with each leg, its
// bound and the stall per token. The rates default to an H200's; `sluice
// gpu-bench` measures the copy rates of a GPU at hand.

#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cmd_plan.h"
#include "model/synth.h"
#include "plan/kv_plan.h"
#include "plan/tier_plan.h"
#include "plan/weight_bytes.h"
#include "weights/placement.h"

namespace sluice::cli::plan_cmd {

using nlohmann::json;
namespace pl = sluice::plan;

namespace {

constexpr double kH200Tflops = 989;  // the h200 profile's bf16 dense peak (plan/hardware.cpp)

// A byte size flag ("6G", "10GB", "512MiB"); "" is unlimited (0).
StatusOr<double> budget_bytes(const std::string& flag, const std::string& text) {
  if (text.empty()) return 0.0;
  auto n = weights::parse_byte_size(text);
  if (!n.ok()) return invalid_argument("{} '{}': {}", flag, text, n.status().message());
  return static_cast<double>(*n);
}

// load_model_input's models, and the synth presets (mixtral-8x7b, 8b, ...) at --weights.
StatusOr<ModelInput> tier_model(const PlanArgs& a) {
  StatusOr<ModelInput> m = load_model_input(a);
  if (m.ok() || a.model.ends_with(".gguf") || a.model.ends_with(".json")) return m;
  StatusOr<SynthShape> synth = synth_preset(a.model);
  if (!synth.ok()) {
    return invalid_argument("-m '{}' is neither a planner preset, a synth preset ({}) nor a file: {}", a.model,
                            fmt::join(synth_preset_names(), ", "), m.status().message());
  }
  ModelInput in;
  ASSIGN_OR_RETURN(in.shape, pl::shape_from_synth(*synth));
  ASSIGN_OR_RETURN(pl::WeightFormat w, pl::parse_weight_format(a.weights));
  in.weights = pl::weight_bytes(in.shape, pl::uniform_mix(w));
  in.weights_note = fmt::format("synth preset at {} ({:.4g} bits/weight)", w.name, w.bits_per_weight());
  return in;
}

json step_json(const pl::TierStep& s) {
  return {{"tokens", s.n_tokens}, {"compute_s", s.compute_s}, {"h2d_bytes", s.h2d_bytes},
          {"disk_bytes", s.disk_bytes}, {"h2d_s", s.h2d_s}, {"disk_s", s.disk_s}, {"boundary_s", s.boundary_s},
          {"step_s", s.step_s}, {"stall_s", s.stall_s}, {"stall_per_token_s", s.stall_per_token_s},
          {"tokens_per_s", s.tokens_per_s}, {"bound", pl::stream_bound_name(s.bound)},
          {"n_ring_slots_planned", s.n_ring_slots_planned}, {"hbm_hit_rate", s.hbm_hit_rate},
          {"host_hit_rate", s.host_hit_rate}};
}

}  // namespace

CLI::App* add_tiers(CLI::App* plan, PlanArgs& a) {
  CLI::App* t = plan->add_subcommand("tiers", "weights over HBM, pinned host RAM and disk: placement, ring, decode "
                                              "and prefill legs, stall per token");
  t->add_option("-m,--model", a.model, "planner preset, synth preset (mixtral-8x7b, ...), .gguf file, or HF config")
      ->capture_default_str();
  t->add_option("--weights", a.weights, "weight format for presets (bf16, q4_0, q8_0, ...)")->capture_default_str();
  t->add_option("--gpu-budget", a.gpu_budget, "HBM for weights, e.g. 6G (default: unlimited)");
  t->add_option("--mem-budget", a.mem_budget, "pinned host RAM for weights, e.g. 10G (default: --budget-gb, else "
                                              "unlimited)");
  t->add_option("--hbm-gbps", a.hbm_gbps, "HBM read rate, GB/s (an H200's copy roof)")->capture_default_str();
  t->add_option("--h2d-gbps", a.h2d_gbps, "pinned host-to-device copy rate, GB/s (an H200's PCIe 5)")
      ->capture_default_str();
  t->add_option("--disk-gbps", a.nvme_gbps, "O_DIRECT read rate of the model file, GB/s (an NVMe drive)")
      ->capture_default_str();
  t->add_option("--tflops", a.tflops, fmt::format("achieved matmul rate, TFLOP/s (default {}, the H200's bf16 "
                                                  "dense peak)", kH200Tflops));
  t->add_option("--batch", a.decode_batch, "sequences in a decode step")->capture_default_str();
  t->add_option("--prefill", a.prefill_tokens, "prompt tokens in a prefill step")->capture_default_str();
  return t;
}

int run_tiers(const PlanArgs& a) {
  if (a.calibrate) {
    return fail(invalid_argument("plan tiers takes the GPU's rates as flags (`sluice gpu-bench` measures the copy "
                                 "rates); --calibrate probes this machine's CPU"));
  }
  auto m = tier_model(a);
  if (!m.ok()) return fail(m.status());
  auto gpu = budget_bytes("--gpu-budget", a.gpu_budget);
  if (!gpu.ok()) return fail(gpu.status());
  if (!a.mem_budget.empty() && a.budget_gb > 0)
    return fail(invalid_argument("give the host budget as --mem-budget or as --budget-gb, not both"));
  auto host = a.budget_gb > 0 ? StatusOr<double>(a.budget_gb * 1e9) : budget_bytes("--mem-budget", a.mem_budget);
  if (!host.ok()) return fail(host.status());
  const pl::TierInputs in{.shape = m->shape,
                          .weights = m->weights,
                          .rates = {.hbm_gbps = a.hbm_gbps, .h2d_gbps = a.h2d_gbps, .disk_gbps = a.nvme_gbps,
                                    .gpu_tflops = a.tflops > 0 ? a.tflops : kH200Tflops},
                          .gpu_budget_bytes = *gpu,
                          .host_budget_bytes = *host,
                          .decode_tokens = a.decode_batch,
                          .prefill_tokens = a.prefill_tokens};
  auto p = pl::plan_tiers(in);
  if (!p.ok()) return fail(p.status());
  std::string t = fmt::format("model     {}\n", pl::shape_summary(m->shape));
  t += fmt::format("weights   {:.3f} GB ({})\n", static_cast<double>(m->weights.total()) / 1e9, m->weights_note);
  t += pl::tier_map(*p, in);
  // The fluid split's price list (engine/fluid_control.h, --fluid-split):
  // what the decode step pays for each unit HBM gives the KV pool, and the
  // f16 KV positions those bytes hold.
  const int64_t n_units = p->routed ? p->n_hbm_experts : p->n_hbm_layers;
  auto costs = pl::demotion_costs(in, n_units);
  if (!costs.ok()) return fail(costs.status());
  const double kv_token = pl::kv_bytes_per_token(m->shape, pl::parse_weight_format("f16").value());
  json fluid = json::array();
  std::string row;
  for (int64_t k = 1; k < static_cast<int64_t>(costs->size()); k *= 2) {
    const double bytes = static_cast<double>(k) * p->unit_bytes;
    const double tokens = kv_token > 0 ? bytes / kv_token : 0;
    fluid.push_back({{"units", k}, {"bytes", bytes}, {"kv_tokens_f16", tokens},
                     {"decode_step_added_s", (*costs)[static_cast<size_t>(k)]}});
    row += fmt::format("{}{} -> +{:.0f} positions, +{:.3f} ms", row.empty() ? "" : "; ", k, tokens,
                       (*costs)[static_cast<size_t>(k)] * 1e3);
  }
  if (!row.empty())
    t += fmt::format("fluid     {} given to the KV pool (f16 positions, decode step added): {}\n",
                     p->routed ? "experts" : "layers", row);
  json j = {{"model", m->shape.name},
            {"weights_bytes", m->weights.total()},
            {"gpu_budget_bytes", *gpu},
            {"host_budget_bytes", *host},
            {"rates", {{"hbm_gbps", in.rates.hbm_gbps}, {"h2d_gbps", in.rates.h2d_gbps},
                       {"disk_gbps", in.rates.disk_gbps}, {"gpu_tflops", in.rates.gpu_tflops}}},
            {"routed", p->routed},
            {"essentials_bytes", p->essentials_bytes},
            {"unit_bytes", p->unit_bytes},
            {"hbm_bytes", p->hbm_bytes},
            {"host_bytes", p->host_bytes},
            {"disk_only_bytes", p->disk_only_bytes},
            {"min_gpu_budget_bytes", p->min_gpu_budget_bytes},
            {"min_host_budget_bytes", p->min_host_budget_bytes},
            {"n_ring_slots", p->n_ring_slots},
            {"n_ring_slots_planned", p->n_ring_slots_planned},
            {"n_staging_slots", p->n_staging_slots},
            {"decode", step_json(p->decode)},
            {"prefill", step_json(p->prefill)},
            {"note", p->note},
            {"fluid", fluid}};
  if (p->routed) {
    j["experts"] = {{"total", p->n_experts}, {"hbm", p->n_hbm_experts}, {"host", p->n_host_experts},
                    {"disk", p->n_disk_experts}};
  } else {
    j["layers"] = {{"map", p->layer_map}, {"hbm", p->n_hbm_layers}, {"host", p->n_host_layers},
                   {"disk", p->n_disk_layers}, {"host_buffer_layers_planned", p->host_buffer_layers_planned}};
  }
  emit(a, j, t);
  return 0;
}

}  // namespace sluice::cli::plan_cmd
