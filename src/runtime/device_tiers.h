// DeviceTiers: the three tiers of a GPU run, --gpu-budget with --mem-budget on
// a backend whose memory is not the host's (issue #43; seeds 000 and 002):
//
//   disk --(O_DIRECT, the weight store's ring)--> host RAM --(copied at each use)--> device
//
// Which layers the device holds is plan::plan_tiers' over the file's own
// shape and bytes: its 'G' layers (spread between the others, so a copied
// layer's transfer hides behind the compute of the held ones around it). The
// weight store places the rest over the host budget by its own rules
// (weights/placement.h, rule 8 for the device's), and the backend copies the
// device's layers at load and every other layer's views at each use
// (Backend::reads_host_weights). A routed model's device tier is every
// layer's dense part; its experts stay the store's (host RAM and the file,
// expert by expert) and the backend keeps those it copies in device slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "plan/tier_plan.h"
#include "sluice/status.h"

namespace sluice {

struct DeviceTiers {
  std::vector<int64_t> device_layers;  // ascending (weights::StreamingOptions::device_layers)
  plan::TierInputs inputs;             // what plan_tiers was given
  plan::TierPlan plan;
  std::string rates_note;              // where inputs.rates came from (the report says it)
  std::string note;                    // anything else the report should say ("" if nothing)
};

// gpu_budget_bytes: the device's weights (0: unlimited: every layer);
// host_budget_bytes: --mem-budget. rates: the GPU's (plan::h200_tier_rates()
// unless measured) with the disk's as far as known.
// Errors: plan_tiers' (a budget below the smallest that streams, named).
StatusOr<DeviceTiers> plan_device_tiers(const ModelFile& file, uint64_t gpu_budget_bytes, uint64_t host_budget_bytes,
                                        const plan::TierRates& rates);

// The plan again with the disk at the rate the weight store measured (0: as
// planned) and a prefill of prefill_tokens (0: as planned): what a run's
// measurements are held to.
StatusOr<plan::TierPlan> replan_device_tiers(const DeviceTiers& tiers, double store_disk_gbps,
                                             int64_t prefill_tokens = 0);

// The load report's lines: the three tiers' plan (tier_map) with the disk at
// the rate the weight store measured (0: as planned), and where the rates came from.
std::string device_tiers_report(const DeviceTiers& tiers, double store_disk_gbps);

}  // namespace sluice
