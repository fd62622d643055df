#include "weights/weight_counters.h"

#include <fmt/format.h>

namespace sluice::weights {

double WeightCountersSnapshot::disk_bytes_per_token() const {
  return n_tokens ? static_cast<double>(disk_read_bytes) / static_cast<double>(n_tokens) : 0.0;
}

double WeightCountersSnapshot::host_bytes_per_token() const {
  return n_tokens ? static_cast<double>(host_read_bytes) / static_cast<double>(n_tokens) : 0.0;
}

double WeightCountersSnapshot::overlap_efficiency() const {
  return compute_s + stall_s > 0 ? compute_s / (compute_s + stall_s) : 1.0;
}

double WeightCountersSnapshot::resident_fraction() const {
  const uint64_t total = resident_bytes + streamed_bytes;
  return total ? static_cast<double>(resident_bytes) / static_cast<double>(total) : 1.0;
}

std::string WeightCountersSnapshot::prometheus() const {
  std::string s;
  auto line = [&](const char* name, const char* labels, double v) {
    s += fmt::format("{}{} {}\n", name, labels, v);
  };
  line("sluice_weights_read_bytes_total", "{tier=\"disk\"}", static_cast<double>(disk_read_bytes));
  line("sluice_weights_read_bytes_total", "{tier=\"host\"}", static_cast<double>(host_read_bytes));
  line("sluice_weights_load_bytes_total", "", static_cast<double>(load_bytes));
  line("sluice_weights_stall_seconds_total", "", stall_s);
  line("sluice_weights_stalls_total", "", static_cast<double>(n_stalls));
  line("sluice_weights_compute_seconds_total", "", compute_s);
  line("sluice_weights_acquires_total", "", static_cast<double>(n_acquires));
  line("sluice_weights_tokens_total", "", static_cast<double>(n_tokens));
  line("sluice_weights_resident_bytes", "", static_cast<double>(resident_bytes));
  line("sluice_weights_streamed_bytes", "", static_cast<double>(streamed_bytes));
  line("sluice_weights_overlap_efficiency", "", overlap_efficiency());
  line("sluice_weights_resident_fraction", "", resident_fraction());
  return s;
}

std::string WeightCountersSnapshot::summary() const {
  return fmt::format(
      "weights: {:.1f} MB/token from disk, {:.1f} MB/token from host; stall {:.3f} s in {} of {} acquires; "
      "compute {:.3f} s; overlap efficiency {:.1f}%; resident fraction {:.1f}%",
      disk_bytes_per_token() / 1e6, host_bytes_per_token() / 1e6, stall_s, n_stalls, n_acquires, compute_s,
      100 * overlap_efficiency(), 100 * resident_fraction());
}

WeightCountersSnapshot operator-(const WeightCountersSnapshot& a, const WeightCountersSnapshot& b) {
  WeightCountersSnapshot d = a;
  d.disk_read_bytes -= b.disk_read_bytes;
  d.host_read_bytes -= b.host_read_bytes;
  d.load_bytes -= b.load_bytes;
  d.stall_s -= b.stall_s;
  d.n_stalls -= b.n_stalls;
  d.compute_s -= b.compute_s;
  d.n_acquires -= b.n_acquires;
  d.n_tokens -= b.n_tokens;
  return d;
}

WeightCountersSnapshot WeightCounters::snapshot() const {
  WeightCountersSnapshot s;
  s.disk_read_bytes = disk_read_bytes_.load(std::memory_order_relaxed);
  s.host_read_bytes = host_read_bytes_.load(std::memory_order_relaxed);
  s.load_bytes = load_bytes_.load(std::memory_order_relaxed);
  s.stall_s = static_cast<double>(stall_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.n_stalls = n_stalls_.load(std::memory_order_relaxed);
  s.compute_s = static_cast<double>(compute_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.n_acquires = n_acquires_.load(std::memory_order_relaxed);
  s.n_tokens = n_tokens_.load(std::memory_order_relaxed);
  s.resident_bytes = resident_bytes_.load(std::memory_order_relaxed);
  s.streamed_bytes = streamed_bytes_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice::weights
