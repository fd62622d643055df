// A serving benchmark's workload draws (bench-serve): length distributions (N, uniform:A:B,
// normal:MEAN:SD), the arrival process, and numbers from std::mt19937_64 by
// fixed formulas, so a seed names one workload on every standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "sluice/status.h"

namespace sluice::bench {

// A length distribution: N, uniform:A:B or normal:MEAN:SD (rounded, clamped to >= 1).
struct Dist {
  enum class Kind { kFixed, kUniform, kNormal } kind = Kind::kFixed;
  double a = 1, b = 0;
};

// Arrival process: every request at t = 0, Poisson with `rate` requests/s,
// or a ramp: request i of n at ramp_s x i / n (evenly spaced, so the number
// running climbs from one as they pile up).
struct Arrival {
  double rate = 0;    // Poisson; 0: not Poisson
  double ramp_s = 0;  // a ramp over this many seconds; 0: not a ramp
  // Request i of n's arrival given the previous one's (t_prev) and a draw u in [0, 1).
  double next(double t_prev, size_t i, size_t n, double u) const;
};

// Numbers from std::mt19937_64 by fixed formulas (the library's distributions
// are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  double uniform01() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return gen_() % n; }

 private:
  std::mt19937_64 gen_;
};

// Errors: kInvalidArgument naming `flag` and the accepted forms.
StatusOr<Dist> parse_dist(std::string_view flag, const std::string& text);
// "all" or "poisson:RATE" (RATE > 0). Errors: kInvalidArgument.
StatusOr<Arrival> parse_arrival(const std::string& text);
// One length from d (>= 1).
int64_t draw(const Dist& d, Rng& rng);

}  // namespace sluice::bench
