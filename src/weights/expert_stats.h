// ExpertLayerStats: what happened to one routed layer's experts, counted the
// same way by the weight store at run time (expert_store.h) and by a replay of
// recorded routing (expert_replay.h).
//
//   chosen            distinct experts the routing chose (summed over steps)
//   predicted         distinct experts predicted for the layer before it ran
//   predicted_chosen  both
//   ready             chosen and already in a slot when the layer routed (a hit)
//   kept              chosen and in a slot no read filled since the layer last
//                     routed: what the cache kept, not the prediction's
//                     read-ahead (the planner's hit rate, plan/expert_plan.h)
//   late              chosen, predicted, still being read (run time: the
//                     store's reads; replay: arrival modelled from a disk rate)
//   late_s            summed over late experts: from the layer routing to the
//                     expert's bytes landing; late_max_s the longest
//   missed            chosen, not in a slot: read on demand
//   prefetch_reads    experts read because they were predicted
//   cancelled         predicted, not chosen, stopped while still being read
// ready + late + missed = chosen. Plain value.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sluice::weights {

struct ExpertLayerStats {
  uint64_t chosen = 0;
  uint64_t predicted = 0;
  uint64_t predicted_chosen = 0;
  uint64_t ready = 0;
  uint64_t kept = 0;
  uint64_t late = 0;
  uint64_t missed = 0;
  uint64_t prefetch_reads = 0;
  uint64_t cancelled = 0;
  double late_s = 0;
  double late_max_s = 0;
  int64_t resident = 0;  // experts of the layer in slots (run time, at the snapshot)

  double recall() const { return chosen ? static_cast<double>(predicted_chosen) / static_cast<double>(chosen) : 0.0; }
  double precision() const {
    return predicted ? static_cast<double>(predicted_chosen) / static_cast<double>(predicted) : 0.0;
  }
  double hit_rate() const { return chosen ? static_cast<double>(ready) / static_cast<double>(chosen) : 0.0; }
  // Mean lateness of a late expert, in milliseconds (0 when none was late);
  // never above 1e3 x late_max_s, which a sum of equal waits divided by their
  // count can pass by a rounding.
  double late_mean_ms() const {
    return late ? std::min(1e3 * late_s / static_cast<double>(late), 1e3 * late_max_s) : 0.0;
  }
  double kept_rate() const { return chosen ? static_cast<double>(kept) / static_cast<double>(chosen) : 0.0; }
  // Experts read (prefetches and misses) per chosen expert: the disk traffic
  // against what the chosen experts alone need.
  double read_ratio() const {
    return chosen ? static_cast<double>(prefetch_reads + missed) / static_cast<double>(chosen) : 0.0;
  }
  // What the predictor alone would read (its predictions plus the chosen
  // experts it missed), per chosen expert: 1 is a perfect predictor.
  double predictor_fetch_ratio() const {
    return chosen ? static_cast<double>(predicted + chosen - predicted_chosen) / static_cast<double>(chosen) : 0.0;
  }

  ExpertLayerStats& operator+=(const ExpertLayerStats& o) {
    chosen += o.chosen;
    predicted += o.predicted;
    predicted_chosen += o.predicted_chosen;
    ready += o.ready;
    kept += o.kept;
    late += o.late;
    missed += o.missed;
    prefetch_reads += o.prefetch_reads;
    cancelled += o.cancelled;
    late_s += o.late_s;
    late_max_s = late_max_s > o.late_max_s ? late_max_s : o.late_max_s;
    resident += o.resident;
    return *this;
  }
};

}  // namespace sluice::weights
