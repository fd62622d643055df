// sluice plan parallel: a job over processes (--parallel pp, ep or pp,ep) planned as
// the job plans itself at load, for ranks alike (the --hw profile or this
// machine calibrated) joined by links of the given latency and bandwidth.
// The planners' inputs come from the model file and the map is printed by
// the same functions rank 0 uses (dist/job_plan.h), so the plan here is the
// one a job of those ranks would print, its rates and links aside (measured
// there per rank).
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cmd_plan.h"
#include "dist/forward_probe.h"
#include "dist/job_plan.h"
#include "dist/session.h"
#include "plan/model_shape.h"
#include "sluice/engine.h"

namespace sluice::cli::plan_cmd {

using nlohmann::json;
namespace pl = sluice::plan;

namespace {

// A rank's disk when neither --disk-gbps nor --calibrate's probe says (nvme-gen3).
constexpr double kPlanParallelDiskGbps = 3.5;
// The engine's context when none is asked for: the trained one, at most this (engine.cpp's ctx_cap).
constexpr int64_t kEngineCtxCap = 4096;

json predicted_json(const dist::PredictedSteps& d) {
  return {{"decode_s", d.decode_s},           {"decode_network_s", d.decode_network_s}, {"decode_disk_s", d.decode_disk_s},
          {"prefill_tokens", d.prefill_tokens}, {"prefill_s", d.prefill_s},
          {"micro_batches", d.micro_batches}};
}

}  // namespace

int run_parallel(const PlanArgs& a, const std::optional<pl::Calibration>& cal) {
  if (Status st = dist::check_parallel_mode(a.parallel, a.ep_size); !st.ok()) return fail(st);
  if (Status st = dist::check_ep_attention(a.parallel, a.ep_attention); !st.ok()) return fail(st);
  const StatusOr<pl::EpAttention> attention = pl::parse_ep_attention(a.ep_attention);
  if (!attention.ok()) return fail(attention.status());
  if (a.n_ranks < 1) return fail(invalid_argument("--ranks must be >= 1, got {}", a.n_ranks));
  if (!(a.link_us >= 0) || !(a.link_gbps > 0))
    return fail(invalid_argument("--link-us must be >= 0 and --link-gbps > 0, got {} and {}", a.link_us, a.link_gbps));
  if (a.n_batch < 1) return fail(invalid_argument("--n-batch must be >= 1, got {}", a.n_batch));
  auto mf = open_model_file(a.model);
  if (!mf.ok()) return fail(mf.status());
  auto hp = hparams_from_metadata(mf->metadata);
  if (!hp.ok()) return fail(hp.status());
  auto shape = pl::shape_from_model_file(*mf);
  if (!shape.ok()) return fail(shape.status());
  auto h = load_hardware(a, cal);
  if (!h.ok()) return fail(h.status());

  // Every rank alike: its memory (or --budget-gb, as a rank's --mem-budget,
  // beyond which its range streams from its disk at --disk-gbps), its rates;
  // every link to rank 0 alike.
  const bool budget = a.budget_gb > 0;
  const double disk_gbps = a.disk_gbps > 0                         ? a.disk_gbps
                           : cal && cal->disk_read_gbps > 0 ? cal->disk_read_gbps
                                                            : kPlanParallelDiskGbps;
  const pl::RankResources rank{.host = h->name,
                               .mem_cap_bytes = static_cast<uint64_t>((budget ? a.budget_gb : h->mem_capacity_gb) * 1e9),
                               .budget_given = budget,
                               .read_gbps = h->mem_gbps,
                               .tflops = h->peak_tflops,
                               // The probe's rate by rows, unless --tflops set the rate.
                               .tflops_curve = cal && !(a.tflops > 0) ? cal->matmul_curve : pl::RateCurve{},
                               .n_threads = a.n_threads,
                               .disk_gbps = budget ? disk_gbps : 0.0};
  pl::RankResources probed = rank;
  if (cal && !(a.tflops > 0)) {
    // This machine's own forward over a few of the model's layers by rows, as
    // each rank of a job times its own at start (dist/forward_probe.h);
    // under a budget also as streamed layers run. The ranks stand for
    // machines of their own: nothing is timed "with every rank at once".
    const uint64_t cap = budget ? rank.mem_cap_bytes : 0;
    auto p = dist::ForwardProbe::create(a.model, a.n_threads, cap, dist::kForwardProbeMaxRows);
    if (!p.ok()) return fail(p.status());
    if (*p) {
      auto r = (*p)->time_alone(budget, 0.1);
      if (!r.ok()) return fail(r.status());
      probed.forward_curve = std::move(r->curve);
      probed.forward_curve_streamed = std::move(r->streamed);
      probed.attention_pair_s = r->attention_pair_s;
    }
  }
  // Every rank on a machine of its own: no two share a disk.
  std::vector<pl::RankResources> ranks(static_cast<size_t>(a.n_ranks), probed);
  for (int64_t r = 0; r < a.n_ranks; ++r) ranks[static_cast<size_t>(r)].host = fmt::format("#{} {}", r, h->name);
  std::vector<pl::LinkFigures> links(static_cast<size_t>(a.n_ranks), {.latency_s = a.link_us * 1e-6, .gbps = a.link_gbps});
  links[0] = {};  // rank 0's own, unused (as the link probe gives it)

  std::string t = fmt::format("model     {}\n", pl::shape_summary(*shape));
  t += fmt::format("ranks     {} x {}: {:.0f} GB/s, {:.3g} TFLOP/s, {:.3g} GB {}{}; links to rank 0 {:g} us, {:g} GB/s\n",
                   a.n_ranks, h->name, h->mem_gbps, h->peak_tflops, static_cast<double>(rank.mem_cap_bytes) / 1e9,
                   budget ? "budget" : "memory",
                   budget ? fmt::format(" (beyond it from disk at {:g} GB/s)", disk_gbps) : std::string(), a.link_us,
                   a.link_gbps);
  json j = {{"model", pl::shape_summary(*shape)}, {"mode", a.parallel},     {"n_ranks", a.n_ranks},
            {"hardware", h->name},                {"read_gbps", h->mem_gbps}, {"tflops", h->peak_tflops},
            {"mem_cap_bytes", rank.mem_cap_bytes}, {"budget_given", budget}, {"disk_gbps", rank.disk_gbps},
            {"link", {{"latency_s", a.link_us * 1e-6}, {"gbps", a.link_gbps}}}};
  json rows = json::array();
  if (a.parallel == "pp,ep" || a.parallel == "ep,pp") {
    pl::PipelineExpertInputs in = dist::pipeline_expert_inputs(*mf, *hp, a.ep_size);
    in.ranks = ranks;
    in.links = links;
    auto p = pl::plan_pipeline_experts(in);
    if (!p.ok()) return fail(p.status());
    t += dist::pipeline_expert_map(*p, a.n_batch);
    for (int64_t g = 0; g < p->n_stages(); ++g) {
      const pl::LayerRange l = p->pipeline.ranges[static_cast<size_t>(g)];
      const pl::ExpertParallelPlan& e = p->stages[static_cast<size_t>(g)];
      for (int64_t m = 0; m < p->ep_size; ++m) {
        const pl::ExpertRange x = e.shares[static_cast<size_t>(m)];
        rows.push_back({{"rank", p->rank_of(g, m)}, {"stage", g}, {"layers", {l.begin, l.end}},
                        {"experts", {x.begin, x.end}}, {"weight_bytes", e.rank_bytes[static_cast<size_t>(m)]},
                        {"streams", p->streams(g, m)}, {"expert_slots", e.slots[static_cast<size_t>(m)]}});
      }
    }
    j["ep_size"] = a.ep_size;
    j["predicted"] = predicted_json(dist::predicted_steps(*p, a.n_batch));
  } else if (a.parallel == "pp") {
    pl::PipelineInputs in = dist::pipeline_inputs(*mf, *hp);
    in.ranks = ranks;
    in.links = links;
    auto p = pl::plan_pipeline(in);
    if (!p.ok()) return fail(p.status());
    t += dist::pipeline_map(*p, in, a.n_batch);
    for (int64_t r = 0; r < p->n_stages(); ++r) {
      const pl::LayerRange g = p->ranges[static_cast<size_t>(r)];
      const auto i = static_cast<size_t>(r);
      json streamed = json::array();
      for (int64_t l = g.begin; l < g.end; ++l)
        if (p->layer_streamed(r, l)) streamed.push_back(l);
      rows.push_back({{"rank", r}, {"layers", {g.begin, g.end}}, {"weight_bytes", p->stage_bytes[i]},
                      {"range_bytes", p->range_bytes[i]}, {"streamed_layers", streamed},
                      {"ring_slots", p->stage_ring_slots[i]}, {"expert_slots", p->stage_expert_slots[i]},
                      {"disk_s", p->disk_s(r, 1)}});
    }
    j["predicted"] = predicted_json(dist::predicted_steps(*p, a.n_batch));
  } else {
    pl::ExpertParallelInputs in = dist::expert_parallel_inputs(*mf, *hp);
    in.ranks = ranks;
    in.links = links;
    in.attention = *attention;
    // The engine's default pool: its default context (min(trained, 4096)) and max_seqs (include/sluice/engine.h).
    const EngineConfig engine_defaults;
    in.kv_bytes = dist::ep_kv_bytes(*mf, *hp, engine_defaults.ctx_size, kEngineCtxCap, engine_defaults.max_seqs);
    auto p = pl::plan_expert_parallel(in);
    if (!p.ok()) return fail(p.status());
    t += dist::expert_parallel_map(*p, a.n_batch);
    for (int64_t r = 0; r < p->n_ranks(); ++r) {
      const pl::ExpertRange g = p->shares[static_cast<size_t>(r)];
      const auto i = static_cast<size_t>(r);
      rows.push_back({{"rank", r}, {"experts", {g.begin, g.end}}, {"weight_bytes", p->rank_bytes[i]},
                      {"share_bytes", p->share_bytes[i]}, {"expert_slots", p->slots[i]},
                      {"decode_hit_rate", p->hit_rate(r, 1)},
                      {"decode_disk_s", p->disk_s(r, 1) * static_cast<double>(in.n_routed_layers)}});
    }
    j["n_expert"] = in.n_expert;
    j["attention"] = {{"placement", pl::ep_attention_name(p->attention)},
                      {"asked", a.ep_attention},
                      {"why", p->attention_why},
                      {"kv_bytes", in.kv_bytes},
                      {"decode_s", {{"rank0", p->rank0_decode_s}, {"every", p->every_decode_s}}}};
    j["n_routed_layers"] = in.n_routed_layers;
    j["predicted"] = predicted_json(dist::predicted_steps(*p, a.n_batch));
  }
  j["ranks"] = rows;
  t += "the map a job of these ranks prints at load (there with each rank's measured rates and links)\n";
  emit(a, j, t);
  return 0;
}

}  // namespace sluice::cli::plan_cmd
