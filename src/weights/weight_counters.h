// WeightCounters: what the weight store counts, always.
//
//   sluice_weights_read_bytes_total{tier="disk"}   streamed from the model file after load
//   sluice_weights_read_bytes_total{tier="host"}   resident bytes handed to the compute tier
//   sluice_weights_load_bytes_total                read once at load (the resident set)
//   sluice_weights_stall_seconds_total             acquire() blocked on a transfer
//   sluice_weights_stalls_total                    acquires that blocked
//   sluice_weights_compute_seconds_total           acquire() return -> release(), summed
//   sluice_weights_acquires_total
//   sluice_weights_tokens_total                    tokens the caller reported per step
//   sluice_weights_resident_bytes / _streamed_bytes (gauges: the placement)
// Derived: bytes per tier per token, overlap efficiency = compute / (compute +
// stall) (the share of the forward pass spent computing rather than waiting for
// weights: 1 when every transfer hid behind compute, toward 0 when disk-bound),
// resident fraction = resident / (resident + streamed).
//
// Plain relaxed atomics: any thread may add, any thread may snapshot; a snapshot
// is not one instant across counters (each value is exact on its own). The names
// are Prometheus-style so a later metric registry can adopt them unchanged.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace sluice::weights {

struct WeightCountersSnapshot {
  uint64_t disk_read_bytes = 0;
  uint64_t host_read_bytes = 0;
  uint64_t load_bytes = 0;
  double stall_s = 0;
  uint64_t n_stalls = 0;
  double compute_s = 0;
  uint64_t n_acquires = 0;
  uint64_t n_tokens = 0;
  uint64_t resident_bytes = 0;
  uint64_t streamed_bytes = 0;

  // Per reported token (0 before any token was reported).
  double disk_bytes_per_token() const;
  double host_bytes_per_token() const;
  // compute / (compute + stall), in [0, 1]; 1 when nothing ran yet.
  double overlap_efficiency() const;
  double resident_fraction() const;
  // Prometheus text exposition, one "name{labels} value" line per counter.
  std::string prometheus() const;
  // A few lines for the run/bench summary.
  std::string summary() const;
};

// Difference of two snapshots (counters subtract, gauges keep `after`).
WeightCountersSnapshot operator-(const WeightCountersSnapshot& after, const WeightCountersSnapshot& before);

class WeightCounters {
 public:
  void add_disk_read(uint64_t n) { disk_read_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void add_host_read(uint64_t n) { host_read_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void add_load(uint64_t n) { load_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void add_stall(double s) {
    stall_ns_.fetch_add(static_cast<uint64_t>(s * 1e9), std::memory_order_relaxed);
    n_stalls_.fetch_add(1, std::memory_order_relaxed);
  }
  void add_compute(double s) { compute_ns_.fetch_add(static_cast<uint64_t>(s * 1e9), std::memory_order_relaxed); }
  void add_acquire() { n_acquires_.fetch_add(1, std::memory_order_relaxed); }
  void add_tokens(uint64_t n) { n_tokens_.fetch_add(n, std::memory_order_relaxed); }
  void set_placement(uint64_t resident, uint64_t streamed) {
    resident_bytes_.store(resident, std::memory_order_relaxed);
    streamed_bytes_.store(streamed, std::memory_order_relaxed);
  }

  WeightCountersSnapshot snapshot() const;

 private:
  std::atomic<uint64_t> disk_read_bytes_{0};
  std::atomic<uint64_t> host_read_bytes_{0};
  std::atomic<uint64_t> load_bytes_{0};
  std::atomic<uint64_t> stall_ns_{0};
  std::atomic<uint64_t> n_stalls_{0};
  std::atomic<uint64_t> compute_ns_{0};
  std::atomic<uint64_t> n_acquires_{0};
  std::atomic<uint64_t> n_tokens_{0};
  std::atomic<uint64_t> resident_bytes_{0};
  std::atomic<uint64_t> streamed_bytes_{0};
};

}  // namespace sluice::weights
