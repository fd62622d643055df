#include "weights/expert_replay.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"

namespace sluice::weights {
namespace {

std::vector<int32_t> distinct(const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (int32_t e : ids)
    if (e >= 0) out.push_back(e);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::vector<ExpertLayerStats> replay_routing(const RoutingTrace& trace, const ReplayOptions& o) {
  ExpertCache cache({.n_layer = trace.n_layer, .n_expert = trace.n_expert, .n_slots = o.n_slots, .policy = o.policy});
  std::vector<ExpertLayerStats> out(static_cast<size_t>(trace.n_layer));
  std::vector<int32_t> held;        // the experts the running layer pins
  std::vector<int32_t> read_ahead;  // the layer's predicted experts read for it this step
  int64_t held_layer = -1;
  for (const auto& step : trace.steps) {
    CHECK(static_cast<int64_t>(step.size()) == trace.n_layer);
    for (int64_t l = 0; l < trace.n_layer; ++l) {
      const RoutingTrace::Layer& tl = step[static_cast<size_t>(l)];
      if (tl.chosen.empty()) continue;
      ExpertLayerStats& r = out[static_cast<size_t>(l)];
      // Prediction, while the previous routed layer still pins its experts.
      const std::vector<int32_t> predicted = o.use_prediction ? distinct(tl.predicted) : std::vector<int32_t>{};
      read_ahead.clear();
      for (int32_t e : predicted) {
        cache.protect(l, e);
        if (cache.slot_of(l, e) >= 0) continue;
        if (cache.insert(l, e).slot < 0) continue;  // no room: the prefetch is dropped
        ++r.prefetch_reads;
        read_ahead.push_back(e);
      }
      for (int32_t e : held) cache.unpin(held_layer, e);
      held.clear();
      // Routing.
      const std::vector<int32_t> chosen = distinct(tl.chosen);
      CHECK(static_cast<int64_t>(chosen.size()) <= o.n_slots);
      r.chosen += static_cast<int64_t>(chosen.size());
      r.predicted += static_cast<int64_t>(predicted.size());
      for (int32_t e : chosen) {
        if (std::binary_search(predicted.begin(), predicted.end(), e)) ++r.predicted_chosen;
        if (cache.slot_of(l, e) >= 0) {
          ++r.ready;
          r.kept += std::find(read_ahead.begin(), read_ahead.end(), e) == read_ahead.end();
        } else {
          CHECK(cache.insert(l, e).slot >= 0);
          ++r.missed;
        }
        cache.pin(l, e);
        cache.note_use(l, e);
      }
      cache.unprotect_layer(l);
      held = chosen;
      held_layer = l;
    }
    cache.end_step();
  }
  for (int32_t e : held) cache.unpin(held_layer, e);
  return out;
}

ExpertLayerStats replay_total(const std::vector<ExpertLayerStats>& layers, int64_t first, int64_t last) {
  if (last < 0) last = static_cast<int64_t>(layers.size()) - 1;
  ExpertLayerStats t;
  for (int64_t l = first; l <= last; ++l) t += layers[static_cast<size_t>(l)];
  return t;
}

std::string replay_table(const std::vector<ExpertLayerStats>& layers, int64_t n_steps) {
  std::string s = fmt::format("  {:>5} {:>8} {:>9} {:>12} {:>7} {:>7} {:>11} {:>12}\n", "layer", "recall",
                              "precision", "predictor x", "ready", "kept", "reads/step", "read/chosen");
  auto row = [&](const std::string& name, const ExpertLayerStats& r) {
    s += fmt::format("  {:>5} {:>7.1f}% {:>8.1f}% {:>11.2f}x {:>6.1f}% {:>6.1f}% {:>11.2f} {:>11.2f}x\n", name,
                     100 * r.recall(), 100 * r.precision(), r.predictor_fetch_ratio(), 100 * r.hit_rate(),
                     100 * r.kept_rate(),
                     n_steps ? static_cast<double>(r.prefetch_reads + r.missed) / static_cast<double>(n_steps) : 0.0,
                     r.read_ratio());
  };
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].chosen > 0) row(std::to_string(l), layers[l]);
  row("all", replay_total(layers));
  return s;
}

}  // namespace sluice::weights
