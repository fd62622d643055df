// Timeline: a serving run's engine state over time (bench-serve --timeline),
// sampled from Engine::stats(): requests running and waiting, KV blocks in use
// and in the pool, the fluid split's units given up, preemptions so far.
// Written as CSV (one row a sample), or as an SVG chart of three panels over
// one time axis (requests; KV blocks; units given up), so a run shows the
// split moving with the load.
//
//   add(s)   keeps s when any count differs from the last kept sample's, or
//            when min_gap_s has passed (a flat stretch keeps one point a gap)
//
// Not thread-safe; a benchmark's driver thread fills it (it allocates).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::bench {

struct TimelineSample {
  double t_s = 0;  // since the run's start
  int64_t running = 0, waiting = 0;
  int64_t kv_used = 0, kv_total = 0;  // blocks
  int64_t demoted = 0;                // fluid split units given up to the KV pool
  int64_t preemptions = 0;            // since start
  int64_t finished = 0;               // requests, since start
};

class Timeline {
 public:
  explicit Timeline(double min_gap_s = 0.1) : min_gap_s_(min_gap_s) {}

  void add(const TimelineSample& s);
  const std::vector<TimelineSample>& samples() const { return samples_; }

  // "t_s,running,waiting,kv_blocks_used,kv_blocks_total,fluid_demoted_units,preemptions,finished" and a row a sample.
  std::string csv() const;
  // A self-contained SVG document; `title` is its heading (escaped).
  std::string svg(std::string_view title) const;
  // PATH ending in .svg gets svg(title), any other csv(). Errors: the file cannot be written.
  Status write(const std::string& path, std::string_view title) const;

 private:
  double min_gap_s_;
  std::vector<TimelineSample> samples_;
};

}  // namespace sluice::bench
