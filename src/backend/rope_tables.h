// The cos/sin tables RoPE rotates by, shared by every backend so that each
// computes the same angles: position * inv_freq in double precision, rounded
// to float once.
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

// cos_sin[t][i] = magnitude * (cos, sin)(positions[t] * inv_freq[i]), in
// double, rounded once (magnitude: RoPE's attention factor, 1 for most models).
//   cos_sin: [positions.size(), inv_freq.size(), 2]
void rope_cos_sin(std::span<const int64_t> positions, std::span<const double> inv_freq, double magnitude,
                  float* cos_sin);

}  // namespace sluice
