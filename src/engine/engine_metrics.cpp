#include "engine/engine_metrics.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "sluice/finish_reason.h"

namespace sluice {

EngineMetrics::EngineMetrics() {
  MetricRegistry& r = global_metrics();
  const char* help = "Requests finished, by outcome";
  for (int i = 0; i < static_cast<int>(std::size(requests)); ++i) {
    const auto reason = static_cast<FinishReason>(i);
    const char* outcome = reason == FinishReason::kNone ? "none" : finish_reason_name(reason);
    requests[i] = r.counter("sluice_requests_total", help, fmt::format("outcome=\"{}\"", outcome));
  }
  generated_tokens = r.counter("sluice_generated_tokens_total", "Tokens generated");
  preemptions = r.counter("sluice_preemptions_total", "Sequences preempted (recompute or swap)");
  const auto secs = exponential_buckets(0.001, 2.0, 18);
  const auto toks = exponential_buckets(1, 2.0, 18);
  ttft = r.histogram("sluice_ttft_seconds", "Time to first token", secs);
  tpot = r.histogram("sluice_tpot_seconds", "Mean time per output token after the first", secs);
  e2e = r.histogram("sluice_e2e_seconds", "Request latency, submit to finish", secs);
  prompt_tokens = r.histogram("sluice_prompt_tokens", "Prompt tokens per request", toks);
  generation_tokens = r.histogram("sluice_generation_tokens", "Generated tokens per request", toks);
  running = r.gauge("sluice_requests_running", "Sequences running");
  waiting = r.gauge("sluice_requests_waiting", "Sequences waiting (including preempted)");
  swapped = r.gauge("sluice_requests_swapped", "Sequences swapped out to host memory");
  kv_blocks_used = r.gauge("sluice_kv_blocks_used", "KV blocks in use");
  kv_blocks_total = r.gauge("sluice_kv_blocks_total", "KV blocks in the pool");
  kv_blocks_cached = r.gauge("sluice_kv_blocks_cached", "Free KV blocks keeping a reusable prefix");
  fluid_demoted = r.gauge("sluice_fluid_demoted_units", "Units (layers, or groups of expert slots) the fluid split gave up to the KV pool, now");
  fluid_demotions = r.gauge("sluice_fluid_demotions", "Units the fluid split gave up to the KV pool, since start");
  fluid_promotions = r.gauge("sluice_fluid_promotions", "Units the fluid split took back from the KV pool, since start");
  prefix_hit_ratio = r.gauge("sluice_prefix_cache_hit_ratio", "Prompt tokens served by the prefix cache / looked up");
  const char* wb = "Weight bytes read, by tier, since start";
  weight_disk_bytes = r.gauge("sluice_weight_read_bytes", wb, "tier=\"disk\"");
  weight_host_bytes = r.gauge("sluice_weight_read_bytes", wb, "tier=\"host\"");
  weight_stall_s = r.gauge("sluice_weight_stall_seconds", "Seconds the forward pass waited for weight transfers");
  weight_overlap = r.gauge("sluice_weight_overlap_efficiency", "compute / (compute + stall) time of the forward pass");
  weight_resident_fraction = r.gauge("sluice_weight_resident_fraction", "Fraction of weight bytes resident in memory");
  spec_drafted = r.counter("sluice_spec_draft_tokens_total", "Draft tokens verified by the target");
  spec_accepted = r.counter("sluice_spec_accepted_tokens_total", "Draft tokens accepted");
  spec_passes = r.counter("sluice_spec_verify_passes_total", "Sequence steps that verified drafts");
  spec_emitted = r.counter("sluice_spec_emitted_tokens_total", "Tokens emitted by steps that verified drafts");
  spec_acceptance = r.gauge("sluice_spec_acceptance_rate", "Accepted / drafted tokens since start");
  spec_tokens_per_pass =
      r.gauge("sluice_spec_tokens_per_pass", "Tokens emitted per target pass of a sequence that verified drafts");
}

void EngineMetrics::observe_finished(const RequestTimings& t, FinishReason reason) {
  requests[static_cast<int>(reason)]->add(1);
  // TTFT is observed at the first token (Engine::Impl::emit_token), so it shows while the request runs.
  if (t.n_generated > 1) tpot->observe(t.tpot_s);
  e2e->observe(t.e2e_s);
  prompt_tokens->observe(static_cast<double>(t.n_prompt));
  generation_tokens->observe(static_cast<double>(t.n_generated));
}

void EngineMetrics::publish(const EngineStats& s) {
  running->set(static_cast<double>(s.running));
  waiting->set(static_cast<double>(s.waiting));
  swapped->set(static_cast<double>(s.swapped));
  kv_blocks_used->set(static_cast<double>(s.kv_blocks_used));
  kv_blocks_total->set(static_cast<double>(s.kv_blocks_total));
  kv_blocks_cached->set(static_cast<double>(s.kv_blocks_cached));
  fluid_demoted->set(static_cast<double>(s.fluid_demoted_units));
  fluid_demotions->set(static_cast<double>(s.fluid_demotions));
  fluid_promotions->set(static_cast<double>(s.fluid_promotions));
  prefix_hit_ratio->set(s.prefix_hit_rate);
  spec_acceptance->set(s.spec_acceptance_rate());
  spec_tokens_per_pass->set(s.spec_tokens_per_pass());
}

void EngineMetrics::init_experts(const ModelHparams& hp) {
  MetricRegistry& r = global_metrics();
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string label = fmt::format("layer=\"{}\"", l);
    expert_recall.push_back(r.gauge("sluice_expert_recall", "Share of chosen experts the prediction named", label));
    expert_precision.push_back(r.gauge("sluice_expert_precision", "Share of predicted experts the routing chose", label));
    expert_hit_rate.push_back(r.gauge("sluice_expert_hit_rate", "Share of chosen experts in a slot when routed", label));
    experts_resident.push_back(r.gauge("sluice_experts_resident", "Experts of the layer in slots", label));
    experts_chosen.push_back(r.gauge("sluice_experts_chosen", "Experts the routing chose (distinct per step)", label));
    experts_ready.push_back(r.gauge("sluice_experts_ready", "Chosen experts in memory when routed", label));
    experts_late.push_back(r.gauge("sluice_experts_late", "Chosen experts still being prefetched when routed", label));
    experts_missed.push_back(r.gauge("sluice_experts_missed", "Chosen experts read on demand", label));
    expert_late_s.push_back(r.gauge("sluice_expert_late_seconds", "Late experts: routing to landing, summed", label));
    expert_late_max_s.push_back(r.gauge("sluice_expert_late_max_seconds", "The latest expert: routing to landing", label));
  }
  if (hp.n_layer * hp.n_expert <= kMaxExpertCells) {
    const size_t n = static_cast<size_t>(hp.n_layer * hp.n_expert);
    for (auto* v : {&expert_resident, &expert_ready, &expert_late, &expert_missed, &expert_predicted_routed,
                    &expert_predicted_unrouted})
      v->assign(n, nullptr);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      if (!hp.layer_is_moe(l)) continue;
      for (int64_t e = 0; e < hp.n_expert; ++e) {
        const size_t i = static_cast<size_t>(l * hp.n_expert + e);
        const std::string le = fmt::format("layer=\"{}\",expert=\"{}\"", l, e);
        expert_resident[i] = r.gauge("sluice_expert_resident", "1: the expert is in a slot, 0: on disk only", le);
        const char* chosen = "Steps whose routing chose the expert, by where it was then";
        expert_ready[i] = r.gauge("sluice_expert_chosen", chosen, le + ",readiness=\"ready\"");
        expert_late[i] = r.gauge("sluice_expert_chosen", chosen, le + ",readiness=\"late\"");
        expert_missed[i] = r.gauge("sluice_expert_chosen", chosen, le + ",readiness=\"missed\"");
        const char* predicted = "Steps that predicted the expert, by whether the routing chose it";
        expert_predicted_routed[i] = r.gauge("sluice_expert_predicted", predicted, le + ",routed=\"yes\"");
        expert_predicted_unrouted[i] = r.gauge("sluice_expert_predicted", predicted, le + ",routed=\"no\"");
      }
    }
  }
  expert_disk_bytes = r.gauge("sluice_expert_read_bytes", "Expert bytes read", "tier=\"disk\"");
  expert_host_bytes = r.gauge("sluice_expert_read_bytes", "Expert bytes read", "tier=\"host\"");
}

std::vector<Counter*> EngineMetrics::init_routing(const ModelHparams& hp) {
  MetricRegistry& r = global_metrics();
  std::vector<Counter*> out(static_cast<size_t>(hp.n_layer * hp.n_expert), nullptr);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (!hp.layer_is_moe(l)) continue;
    for (int64_t e = 0; e < hp.n_expert; ++e) {
      out[static_cast<size_t>(l * hp.n_expert + e)] = r.counter(
          "sluice_expert_routed_total", "Tokens routed to the expert", fmt::format("layer=\"{}\",expert=\"{}\"", l, e));
    }
  }
  return out;
}

void EngineMetrics::publish_experts(const weights::ExpertStatsSnapshot& s) {
  for (size_t l = 0; l < s.layers.size() && l < expert_recall.size(); ++l) {
    expert_recall[l]->set(s.layers[l].recall());
    expert_precision[l]->set(s.layers[l].precision());
    expert_hit_rate[l]->set(s.layers[l].hit_rate());
    experts_resident[l]->set(static_cast<double>(s.layers[l].resident));
    experts_chosen[l]->set(static_cast<double>(s.layers[l].chosen));
    experts_ready[l]->set(static_cast<double>(s.layers[l].ready));
    experts_late[l]->set(static_cast<double>(s.layers[l].late));
    experts_missed[l]->set(static_cast<double>(s.layers[l].missed));
    expert_late_s[l]->set(s.layers[l].late_s);
    expert_late_max_s[l]->set(s.layers[l].late_max_s);
  }
  const weights::ExpertHeatSnapshot& h = s.experts;
  if (static_cast<int64_t>(expert_resident.size()) == h.n_layer * h.n_expert) {
    for (size_t i = 0; i < h.cells.size(); ++i) {
      if (!expert_resident[i]) continue;
      const weights::ExpertHeatCell& c = h.cells[i];
      expert_resident[i]->set(c.resident ? 1.0 : 0.0);
      expert_ready[i]->set(static_cast<double>(c.ready));
      expert_late[i]->set(static_cast<double>(c.late));
      expert_missed[i]->set(static_cast<double>(c.missed));
      expert_predicted_routed[i]->set(static_cast<double>(c.predicted_chosen));
      // (a snapshot taken mid-count may hold the hit before the prediction)
      expert_predicted_unrouted[i]->set(static_cast<double>(c.predicted - std::min(c.predicted, c.predicted_chosen)));
    }
  }
  if (expert_disk_bytes) expert_disk_bytes->set(static_cast<double>(s.disk_bytes));
  if (expert_host_bytes) expert_host_bytes->set(static_cast<double>(s.host_bytes));
}

void EngineMetrics::publish_device_experts(const ExpertSlotCounts& c) {
  if (!device_experts_late) {
    if (c.kept + c.ahead + c.missed + c.copies_ahead == 0) return;
    MetricRegistry& r = global_metrics();
    const char* chosen = "Chosen experts a device keeps in slots, by where they were found, since load";
    const char* found[3] = {"kept", "ahead", "missed"};
    for (int i = 0; i < 3; ++i)
      device_experts_chosen[i] = r.gauge("sluice_device_experts_chosen", chosen, fmt::format("found=\"{}\"", found[i]));
    device_experts_late = r.gauge("sluice_device_experts_late",
                                  "Chosen experts found in a device slot whose copy ahead was still running");
    const char* copies = "Experts copied ahead into a device's slots, by outcome, since load";
    const char* outcome[3] = {"made", "dropped", "declined"};
    for (int i = 0; i < 3; ++i)
      device_expert_copies[i] = r.gauge("sluice_device_expert_copies_ahead", copies,
                                        fmt::format("outcome=\"{}\"", outcome[i]));
  }
  const uint64_t chosen[3] = {c.kept, c.ahead, c.missed}, copies[3] = {c.copies_ahead, c.dropped, c.declined};
  for (int i = 0; i < 3; ++i) {
    device_experts_chosen[i]->set(static_cast<double>(chosen[i]));
    device_expert_copies[i]->set(static_cast<double>(copies[i]));
  }
  device_experts_late->set(static_cast<double>(c.late));
}

void EngineMetrics::publish_weights(const weights::WeightCountersSnapshot& w) {
  weight_disk_bytes->set(static_cast<double>(w.disk_read_bytes));
  weight_host_bytes->set(static_cast<double>(w.host_read_bytes));
  weight_stall_s->set(w.stall_s);
  weight_overlap->set(w.overlap_efficiency());
  weight_resident_fraction->set(w.resident_fraction());
}

}  // namespace sluice
