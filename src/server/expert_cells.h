// ExpertCells: the registry's per-expert series as dense matrices, for /stats.
//
// engine_metrics.h writes a series per (layer, expert) in seven families
// (sluice_expert_routed_total, sluice_expert_resident, sluice_expert_chosen
// by readiness, sluice_expert_predicted by routed), labels
// `layer="L",expert="E"` then the family's own. A model at the cap
// (kMaxExpertCells = 8192 cells) has about 57,000 of them: walking the
// registry's maps of those on every snapshot cost more than the rest of
// /stats together. Metrics never move, so the cells keep each series' metric
// from one walk and read them straight after; they walk again only when the
// registry has created a series since (MetricRegistry::series_count()) or the
// model's shape differs.
//
//   cells.read(registry, n_layer, n_expert);            every snapshot
//   const Matrix* m = cells.find("sluice_expert_chosen", ",readiness=\"ready\"");
//   cells.write(out, m);                                [n_layer][n_expert] as JSON text
//
// Not thread-safe: the caller serializes read() and what follows it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/metrics.h"

namespace sluice::server {

class ExpertCells {
 public:
  // One family (with its own labels) by cell: value[l * n_expert + e], and
  // present where the cell has a series (dense layers have none).
  struct Matrix {
    std::vector<double> value;
    std::vector<uint8_t> present;
  };

  // Whether a family's series are the cells' (the rest of the registry is not).
  static bool holds(const std::string& family);

  // Reads every cell of a model of n_layer x n_expert (0 x 0: none) from the
  // registry, finding the series again first when it has new ones.
  void read(const MetricRegistry& registry, int64_t n_layer, int64_t n_expert);

  // The cells of a family and its extra labels as of the last read(), or null
  // when it has none. Valid until the next read().
  const Matrix* find(std::string_view name, std::string_view extra = "") const;

  // Appends [n_layer][n_expert] of `values` (the matrix's own, or one derived
  // from it) to `out` as JSON text: a layer without a series for expert 0 is
  // null (a dense layer), a missing cell 0, a whole number an integer, NaN and
  // infinities 0. Written directly, not through a JSON tree: at the cap a
  // snapshot holds eight of these, 65,536 numbers.
  void write(std::string& out, const Matrix* cells, const std::vector<double>* values = nullptr) const;

 private:
  struct Family {
    std::string name, extra;
    std::vector<const Counter*> counters;  // by cell, when the family counts
    std::vector<const Gauge*> gauges;      // by cell, when it is a gauge
    Matrix m;
  };
  void index(const MetricRegistry& registry);
  Family& family(const std::string& name, std::string_view extra);

  uint64_t indexed_series_ = UINT64_MAX;  // the registry's series_count() at index(); none yet
  int64_t n_layer_ = 0, n_expert_ = 0;
  std::vector<Family> families_;  // seven at most
  size_t last_ = 0;               // the family the last indexed series went to
};

}  // namespace sluice::server
