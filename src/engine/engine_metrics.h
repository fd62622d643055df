// EngineMetrics: the serving engine's entries in the global metric registry.
//
//   sluice_requests_total{outcome="stop|length|abort|error"}   counter
//   sluice_generated_tokens_total, sluice_preemptions_total     counters
//   sluice_ttft_seconds, sluice_tpot_seconds, sluice_e2e_seconds histograms
//   sluice_prompt_tokens, sluice_generation_tokens              histograms (per request)
//   sluice_requests_running, sluice_requests_waiting, sluice_requests_swapped,
//   sluice_kv_blocks_used, sluice_kv_blocks_total, sluice_kv_blocks_cached,
//   sluice_prefix_cache_hit_ratio, sluice_fluid_demoted_units,
//   sluice_fluid_demotions, sluice_fluid_promotions             gauges
//   sluice_weight_read_bytes{tier="disk|host"}, sluice_weight_stall_seconds,
//   sluice_weight_overlap_efficiency, sluice_weight_resident_fraction
//                                   gauges mirroring the weight store's counters
//   sluice_spec_draft_tokens_total, sluice_spec_accepted_tokens_total,
//   sluice_spec_verify_passes_total, sluice_spec_emitted_tokens_total   counters
//   sluice_spec_acceptance_rate, sluice_spec_tokens_per_pass            gauges
//   sluice_expert_recall{layer}, sluice_expert_precision{layer},
//   sluice_expert_hit_rate{layer}, sluice_experts_resident{layer},
//   sluice_experts_chosen{layer}, sluice_experts_ready{layer},
//   sluice_experts_late{layer}, sluice_experts_missed{layer} (ready + late +
//   missed = chosen, since start), sluice_expert_late_seconds{layer} (summed
//   lateness), sluice_expert_late_max_seconds{layer},
//   sluice_expert_read_bytes{tier="disk|host"}   gauges, when experts stream
//   sluice_expert_resident{layer,expert} (1: in a slot, 0: on disk only),
//   sluice_expert_chosen{layer,expert,readiness="ready|late|missed"},
//   sluice_expert_predicted{layer,expert,routed="yes|no"} (predictions the
//   routing then chose or not)   gauges per expert, when experts stream and
//                                the model has at most kMaxExpertCells
//                                (layer, expert) pairs
//   sluice_expert_routed_total{layer,expert}     counter: tokens routed to the
//                                   expert (routed models, resident or streamed)
// Several engines in one process share these series.
#pragma once

#include "base/expert_slot_range.h"
#include "base/metrics.h"
#include "model/hparams.h"
#include "sluice/engine.h"
#include "weights/expert_store.h"
#include "weights/weight_counters.h"

namespace sluice {

// Per-expert series stop here: n_layer * n_expert above it (a model of
// hundreds of experts in each of tens of layers) reports per layer only.
inline constexpr int64_t kMaxExpertCells = 8192;

struct EngineMetrics {
  EngineMetrics();
  void observe_finished(const RequestTimings& t, FinishReason reason);
  void publish(const EngineStats& s);
  void publish_weights(const weights::WeightCountersSnapshot& w);
  // Creates the per-layer expert series, and the per-expert ones of routed
  // layers within kMaxExpertCells (once, at engine creation).
  void init_experts(const ModelHparams& hp);
  void publish_experts(const weights::ExpertStatsSnapshot& s);
  // A device's expert slots (Backend::expert_slot_counts): its series are
  // made at the first counts that are not all zero.
  void publish_device_experts(const ExpertSlotCounts& c);
  // Creates sluice_expert_routed_total for every routed layer and expert;
  // returns them [n_layer * n_expert], null for dense layers (Model::set_routing_counters).
  std::vector<Counter*> init_routing(const ModelHparams& hp);

  Counter* requests[5];  // by FinishReason
  Counter* generated_tokens;
  Counter* preemptions;
  Histogram* ttft;
  Histogram* tpot;
  Histogram* e2e;
  Histogram* prompt_tokens;
  Histogram* generation_tokens;
  Gauge* running;
  Gauge* waiting;
  Gauge* swapped;
  Gauge* kv_blocks_used;
  Gauge* kv_blocks_total;
  Gauge* kv_blocks_cached;
  Gauge* fluid_demoted;
  Gauge* fluid_demotions;
  Gauge* fluid_promotions;
  Gauge* prefix_hit_ratio;
  Gauge* weight_disk_bytes;
  Gauge* weight_host_bytes;
  Gauge* weight_stall_s;
  Gauge* weight_overlap;
  Gauge* weight_resident_fraction;
  Counter* spec_drafted;
  Counter* spec_accepted;
  Counter* spec_passes;
  Counter* spec_emitted;
  Gauge* spec_acceptance;
  Gauge* spec_tokens_per_pass;
  // [n_layer] each, empty unless experts stream.
  std::vector<Gauge*> expert_recall, expert_precision, expert_hit_rate, experts_resident;
  std::vector<Gauge*> experts_chosen, experts_ready, experts_late, experts_missed, expert_late_s, expert_late_max_s;
  // [n_layer * n_expert] each (null for dense layers), empty unless experts
  // stream within kMaxExpertCells.
  std::vector<Gauge*> expert_resident, expert_ready, expert_late, expert_missed, expert_predicted_routed,
      expert_predicted_unrouted;
  Gauge* device_experts_chosen[3] = {};   // found: kept, ahead, missed
  Gauge* device_experts_late = nullptr;
  Gauge* device_expert_copies[3] = {};    // copies ahead: made, dropped, declined
  Gauge* expert_disk_bytes = nullptr;
  Gauge* expert_host_bytes = nullptr;
};

}  // namespace sluice
