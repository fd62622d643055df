// ExpertHeat: what happened to each expert of each routed layer while its
// experts stream, for the heat map of the live page (/stats) and /metrics.
// The expert store counts into it as it decides (expert_store.h); its sums
// over a layer's experts are that layer's ExpertLayerStats figures.
//
//   resident          the expert is in a slot now (landed or being read)
//   ready/late/missed steps whose routing chose it, by where it was then:
//                     in a slot, still being read by a prefetch, read on
//                     demand (ready + late + missed = chosen)
//   predicted         steps that predicted it before the layer routed
//   predicted_chosen  ... and the routing chose it (a prediction hit; a
//                     chosen expert not predicted is a prediction miss)
//
// Cells are [n_layer * n_expert] relaxed atomics allocated at construction:
// counting allocates nothing and takes no lock. Writers: the forward pass's
// thread; snapshot() from any thread (each cell is whole, cells may be from
// slightly different moments).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::weights {

// Where a chosen expert was when its layer routed.
enum class ExpertReadiness { kReady, kLate, kMissed };

struct ExpertHeatCell {
  uint64_t ready = 0;
  uint64_t late = 0;
  uint64_t missed = 0;
  uint64_t predicted = 0;
  uint64_t predicted_chosen = 0;
  bool resident = false;

  uint64_t chosen() const { return ready + late + missed; }
};

// A plain copy of the cells. Empty (n_layer 0) when experts do not stream.
struct ExpertHeatSnapshot {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  std::vector<ExpertHeatCell> cells;  // [n_layer * n_expert]

  const ExpertHeatCell& at(int64_t layer, int64_t expert) const {
    return cells[static_cast<size_t>(layer * n_expert + expert)];
  }
};

class ExpertHeat {
 public:
  ExpertHeat(int64_t n_layer, int64_t n_expert);

  // The routing of `layer` chose `expert`, which was `r`.
  void count_chosen(int64_t layer, int64_t expert, ExpertReadiness r);
  // `expert` was predicted for `layer`, and the routing chose it or not.
  void count_predicted(int64_t layer, int64_t expert, bool chosen);
  // The expert entered a slot (true) or left it (false).
  void set_resident(int64_t layer, int64_t expert, bool resident);

  ExpertHeatSnapshot snapshot() const;

 private:
  struct Cell {
    std::atomic<uint64_t> ready{0}, late{0}, missed{0}, predicted{0}, predicted_chosen{0};
    std::atomic<bool> resident{false};
  };
  Cell& cell(int64_t layer, int64_t expert) { return cells_[static_cast<size_t>(layer * n_expert_ + expert)]; }

  int64_t n_layer_;
  int64_t n_expert_;
  std::unique_ptr<Cell[]> cells_;  // [n_layer * n_expert]
};

}  // namespace sluice::weights
