// Test harness for per-op tests: outputs live in guarded, poisoned buffers, and
// results are compared with the scalar reference by normalized error.
//
//   [guard: kGuardFloats canaries][payload: n floats, NaN-poisoned][guard]
//
// A kernel that writes out of bounds breaks a canary; one that skips an element
// leaves a NaN, which fails every comparison.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_features.h"

namespace sluice::cpu::testing {

constexpr size_t kGuardFloats = 64;
constexpr uint32_t kCanaryBits = 0x7fc0dead;  // a NaN pattern no kernel produces

class GuardedFloats {
 public:
  explicit GuardedFloats(size_t n) : n_(n), buf_(n + 2 * kGuardFloats) {
    for (size_t i = 0; i < buf_.size(); ++i) std::memcpy(&buf_[i], &kCanaryBits, 4);
    for (size_t i = 0; i < n_; ++i) data()[i] = std::numeric_limits<float>::quiet_NaN();
  }
  float* data() { return buf_.data() + kGuardFloats; }
  const float* data() const { return buf_.data() + kGuardFloats; }
  size_t size() const { return n_; }
  // True if no canary was overwritten.
  bool guards_intact() const {
    for (size_t i = 0; i < kGuardFloats; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &buf_[i], 4);
      std::memcpy(&b, &buf_[kGuardFloats + n_ + i], 4);
      if (a != kCanaryBits || b != kCanaryBits) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<float> buf_;
};

// Bytes with canary bytes around them, for kernels that write non-float output.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t n) : n_(n), buf_(n + 2 * kGuard, 0xA5) {}
  uint8_t* data() { return buf_.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf_[i] != 0xA5 || buf_[kGuard + n_ + i] != 0xA5) return false;
    return true;
  }

 private:
  static constexpr size_t kGuard = 256;
  size_t n_;
  std::vector<uint8_t> buf_;
};

// sum((a - ref)^2) / sum(ref^2); infinite if a has a NaN or inf.
inline double nmse(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Every instruction-set level this CPU runs, scalar first.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(max_supported_isa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

// This thread's CPU time in seconds (timing checks that hold on a loaded machine).
inline double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace sluice::cpu::testing
