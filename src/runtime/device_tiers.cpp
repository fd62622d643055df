#include "runtime/device_tiers.h"

#include <fmt/format.h>

#include "plan/model_shape.h"
#include "plan/weight_bytes.h"

namespace sluice {

StatusOr<DeviceTiers> plan_device_tiers(const ModelFile& file, uint64_t gpu_budget_bytes, uint64_t host_budget_bytes,
                                        const plan::TierRates& rates) {
  DeviceTiers t;
  ASSIGN_OR_RETURN(const plan::ModelShape shape, plan::shape_from_model_file(file));
  t.inputs = plan::TierInputs{.shape = shape,
                              .weights = plan::weight_bytes_of_file(file, shape),
                              .rates = rates,
                              .gpu_budget_bytes = static_cast<double>(gpu_budget_bytes),
                              .host_budget_bytes = static_cast<double>(host_budget_bytes)};
  ASSIGN_OR_RETURN(t.plan, plan::plan_tiers(t.inputs));
  if (t.plan.routed) {  // every layer's dense part; the experts come from the store, one by one
    for (int64_t l = 0; l < shape.n_layer; ++l) t.device_layers.push_back(l);
  } else {
    for (size_t l = 0; l < t.plan.layer_map.size(); ++l)
      if (t.plan.layer_map[l] == 'G') t.device_layers.push_back(static_cast<int64_t>(l));
  }
  return t;
}

namespace {

// The plan's inputs with the disk at the store's rate and a prefill of
// prefill_tokens (0: each as planned).
plan::TierInputs inputs_at(const DeviceTiers& tiers, double store_disk_gbps, int64_t prefill_tokens) {
  plan::TierInputs in = tiers.inputs;
  if (store_disk_gbps > 0) in.rates.disk_gbps = store_disk_gbps;
  if (prefill_tokens > 0) in.prefill_tokens = prefill_tokens;
  return in;
}

}  // namespace

StatusOr<plan::TierPlan> replan_device_tiers(const DeviceTiers& tiers, double store_disk_gbps,
                                             int64_t prefill_tokens) {
  return plan::plan_tiers(inputs_at(tiers, store_disk_gbps, prefill_tokens));
}

std::string device_tiers_report(const DeviceTiers& tiers, double store_disk_gbps) {
  const plan::TierInputs in = inputs_at(tiers, store_disk_gbps, 0);
  const StatusOr<plan::TierPlan> p = plan::plan_tiers(in);
  std::string s = fmt::format("[sluice] three tiers on the device: {} layers held there{}; rates: {}\n",
                              tiers.device_layers.size(),
                              tiers.plan.routed ? " (a routed model: their dense parts; experts come from host RAM and "
                                                  "the file, each kept in a device slot once copied)"
                                                : "",
                              tiers.rates_note.empty() ? std::string("as given") : tiers.rates_note);
  if (!tiers.note.empty()) s += "[sluice] " + tiers.note + "\n";
  if (!p.ok()) return s + fmt::format("[sluice] (no prediction: {})\n", p.status().message());
  return s + plan::tier_map(*p, in);
}

}  // namespace sluice
