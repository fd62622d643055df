#include "weights/expert_replay.h"

#include <algorithm>
#include <limits>

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

// One disk that reads one expert at a time in read_s each, critical reads
// before prefetches, oldest first; a read once begun runs to its end. With
// read_s == 0 every read lands when it is queued.
class DiskModel {
 public:
  DiskModel(int64_t n_layer, int64_t n_expert, double read_s)
      : n_expert_(n_expert), read_s_(read_s), landed_(static_cast<size_t>(n_layer * n_expert), kNone) {}

  // Queues a read of (l, e) at time `now` (not before an earlier call's).
  void queue(int64_t l, int32_t e, bool critical, double now) {
    if (read_s_ <= 0) {
      at(l, e) = now;
      return;
    }
    run_until(now);
    busy_until_ = std::max(busy_until_, now);
    at(l, e) = kQueued;
    queued_.push_back({l, e, critical, next_seq_++});
  }
  // Begins the queued reads the disk reaches by `t`.
  void run_until(double t) {
    while (!queued_.empty() && busy_until_ <= t) start_next();
  }
  // When (l, e)'s read lands: begins reads (critical ones first) until it has.
  double landing(int64_t l, int32_t e) {
    while (at(l, e) == kQueued) start_next();
    return at(l, e);
  }
  // Whether (l, e)'s bytes are in by `t` (kNone: never read, as if resident).
  bool in_by(int64_t l, int32_t e, double t) const {
    const double x = landed_[static_cast<size_t>(l * n_expert_ + e)];
    return x != kQueued && x <= t;
  }
  void promote(int64_t l, int32_t e) {
    for (Read& r : queued_)
      if (r.layer == l && r.expert == e) r.critical = true;
  }
  // Drops a read not yet begun; true if there was one.
  bool drop(int64_t l, int32_t e) {
    for (size_t i = 0; i < queued_.size(); ++i) {
      if (queued_[i].layer != l || queued_[i].expert != e) continue;
      queued_.erase(queued_.begin() + static_cast<long>(i));
      at(l, e) = kNone;
      return true;
    }
    return false;
  }
  // An evicted expert's slot: its read (if not begun) is stopped.
  void forget(int64_t l, int32_t e) {
    drop(l, e);
    at(l, e) = kNone;
  }

 private:
  static constexpr double kNone = -1.0;  // not read (or its slot was taken): no arrival pending
  static constexpr double kQueued = std::numeric_limits<double>::infinity();
  struct Read {
    int64_t layer;
    int32_t expert;
    bool critical;
    uint64_t seq;
  };
  double& at(int64_t l, int32_t e) { return landed_[static_cast<size_t>(l * n_expert_ + e)]; }
  void start_next() {
    size_t best = 0;
    for (size_t i = 1; i < queued_.size(); ++i) {
      const Read& a = queued_[i];
      const Read& b = queued_[best];
      if (a.critical != b.critical ? a.critical : a.seq < b.seq) best = i;
    }
    busy_until_ += read_s_;
    at(queued_[best].layer, queued_[best].expert) = busy_until_;
    queued_.erase(queued_.begin() + static_cast<long>(best));
  }

  int64_t n_expert_;
  double read_s_;
  double busy_until_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<Read> queued_;
  std::vector<double> landed_;  // [n_layer * n_expert] landing time, kQueued, or kNone
};

}  // namespace

std::vector<ExpertLayerStats> replay_routing(const RoutingTrace& trace, const ReplayOptions& o) {
  ExpertCache cache({.n_layer = trace.n_layer, .n_expert = trace.n_expert, .n_slots = o.n_slots, .policy = o.policy});
  const double read_s =
      o.disk_bytes_per_s > 0 ? static_cast<double>(o.expert_bytes) / o.disk_bytes_per_s : 0.0;
  DiskModel disk(trace.n_layer, trace.n_expert, read_s);
  std::vector<ExpertLayerStats> out(static_cast<size_t>(trace.n_layer));
  std::vector<int32_t> held;        // the experts the running layer pins
  std::vector<int32_t> read_ahead;  // the layer's predicted experts read for it this step
  std::vector<int32_t> late;        // chosen experts still being read when their layer routed
  int64_t held_layer = -1;
  double now = 0;          // when the next routed layer routes
  double compute_at = 0;   // when the previous routed layer began computing
  auto insert = [&](int64_t l, int32_t e) {
    const ExpertCache::Placement p = cache.insert(l, e);
    if (p.slot >= 0 && p.evicted_layer >= 0) disk.forget(p.evicted_layer, static_cast<int32_t>(p.evicted_expert));
    return p.slot >= 0;
  };
  for (const auto& step : trace.steps) {
    CHECK(static_cast<int64_t>(step.size()) == trace.n_layer);
    compute_at = now;  // the first routed layer is predicted once the step's token is known
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
        if (!insert(l, e)) continue;  // no room: the prefetch is dropped
        disk.queue(l, e, /*critical=*/false, compute_at);
        ++r.prefetch_reads;
        read_ahead.push_back(e);
      }
      for (int32_t e : held) cache.unpin(held_layer, e);
      held.clear();
      // Routing.
      disk.run_until(now);
      const std::vector<int32_t> chosen = distinct(tl.chosen);
      CHECK(static_cast<int64_t>(chosen.size()) <= o.n_slots);
      r.chosen += static_cast<int64_t>(chosen.size());
      r.predicted += static_cast<int64_t>(predicted.size());
      // Predictions the routing did not choose whose reads have not begun are
      // dropped, and their slots emptied.
      for (int32_t e : predicted) {
        if (std::binary_search(chosen.begin(), chosen.end(), e) || !disk.drop(l, e)) continue;
        cache.clear_slot(cache.slot_of(l, e));
        ++r.cancelled;
      }
      late.clear();
      for (int32_t e : chosen) {
        if (std::binary_search(predicted.begin(), predicted.end(), e)) ++r.predicted_chosen;
        if (cache.slot_of(l, e) >= 0) {
          r.kept += std::find(read_ahead.begin(), read_ahead.end(), e) == read_ahead.end();
          if (disk.in_by(l, e, now)) {
            ++r.ready;
          } else {
            ++r.late;
            disk.promote(l, e);
            late.push_back(e);
          }
        } else {
          CHECK(insert(l, e));
          ++r.missed;
          disk.queue(l, e, /*critical=*/true, now);
        }
        cache.pin(l, e);
        cache.note_use(l, e);
      }
      // The layer computes once its experts are in.
      double start = now;
      for (int32_t e : chosen) start = std::max(start, disk.landing(l, e));
      for (int32_t e : late) {
        const double late_s = disk.landing(l, e) - now;
        r.late_s += late_s;
        r.late_max_s = std::max(r.late_max_s, late_s);
      }
      cache.unprotect_layer(l);
      held = chosen;
      held_layer = l;
      compute_at = start;
      now = start + o.layer_s;
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
  std::string s = fmt::format("  {:>5} {:>8} {:>9} {:>12} {:>7} {:>7} {:>7} {:>7} {:>8} {:>11} {:>12}\n", "layer",
                              "recall", "precision", "predictor x", "ready", "kept", "late", "missed", "late ms",
                              "reads/step", "read/chosen");
  auto share = [](uint64_t n, uint64_t of) { return of ? 100.0 * static_cast<double>(n) / static_cast<double>(of) : 0.0; };
  auto row = [&](const std::string& name, const ExpertLayerStats& r) {
    s += fmt::format("  {:>5} {:>7.1f}% {:>8.1f}% {:>11.2f}x {:>6.1f}% {:>6.1f}% {:>6.1f}% {:>6.1f}% {:>8.3f} {:>11.2f} "
                     "{:>11.2f}x\n",
                     name, 100 * r.recall(), 100 * r.precision(), r.predictor_fetch_ratio(), 100 * r.hit_rate(),
                     100 * r.kept_rate(), share(r.late, r.chosen), share(r.missed, r.chosen), r.late_mean_ms(),
                     n_steps ? static_cast<double>(r.prefetch_reads + r.missed) / static_cast<double>(n_steps) : 0.0,
                     r.read_ratio());
  };
  for (size_t l = 0; l < layers.size(); ++l)
    if (layers[l].chosen > 0) row(std::to_string(l), layers[l]);
  row("all", replay_total(layers));
  return s;
}

}  // namespace sluice::weights
