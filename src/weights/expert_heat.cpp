#include "weights/expert_heat.h"

namespace sluice::weights {

ExpertHeat::ExpertHeat(int64_t n_layer, int64_t n_expert)
    : n_layer_(n_layer), n_expert_(n_expert), cells_(new Cell[static_cast<size_t>(n_layer * n_expert)]) {}

void ExpertHeat::count_chosen(int64_t layer, int64_t expert, ExpertReadiness r) {
  Cell& c = cell(layer, expert);
  std::atomic<uint64_t>& n = r == ExpertReadiness::kReady ? c.ready : r == ExpertReadiness::kLate ? c.late : c.missed;
  n.fetch_add(1, std::memory_order_relaxed);
}

void ExpertHeat::count_predicted(int64_t layer, int64_t expert, bool chosen) {
  Cell& c = cell(layer, expert);
  c.predicted.fetch_add(1, std::memory_order_relaxed);
  if (chosen) c.predicted_chosen.fetch_add(1, std::memory_order_relaxed);
}

void ExpertHeat::set_resident(int64_t layer, int64_t expert, bool resident) {
  cell(layer, expert).resident.store(resident, std::memory_order_relaxed);
}

ExpertHeatSnapshot ExpertHeat::snapshot() const {
  ExpertHeatSnapshot s{.n_layer = n_layer_, .n_expert = n_expert_};
  s.cells.resize(static_cast<size_t>(n_layer_ * n_expert_));
  for (size_t i = 0; i < s.cells.size(); ++i) {
    const Cell& c = cells_[i];
    s.cells[i] = ExpertHeatCell{.ready = c.ready.load(std::memory_order_relaxed),
                                .late = c.late.load(std::memory_order_relaxed),
                                .missed = c.missed.load(std::memory_order_relaxed),
                                .predicted = c.predicted.load(std::memory_order_relaxed),
                                .predicted_chosen = c.predicted_chosen.load(std::memory_order_relaxed),
                                .resident = c.resident.load(std::memory_order_relaxed)};
  }
  return s;
}

}  // namespace sluice::weights
