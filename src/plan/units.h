// Units of the performance model.
//
// The planner works in SI units throughout: seconds, bytes, FLOP/s. Bandwidths
// are given in decimal GB/s (1e9 bytes/s, the unit datasheets and the essays
// use) and compute in TFLOP/s (1e12). KV sizes are often quoted in GiB (2^30);
// both are here so every figure can be printed in the unit its source used.
#pragma once

#include <cstdint>

namespace sluice::plan {

inline constexpr double kGB = 1e9;                              // decimal gigabyte
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;        // binary gibibyte
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kTera = 1e12;

inline double to_gb(double bytes) { return bytes / kGB; }
inline double to_gib(double bytes) { return bytes / kGiB; }
inline double gbps_to_bytes_per_s(double gbps) { return gbps * kGB; }
inline double tflops_to_flops(double tflops) { return tflops * kTera; }

}  // namespace sluice::plan
