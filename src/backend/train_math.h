// What the reference (reference_train_ops.cpp) and the CPU backend
// (cpu/train_ops.cpp) do alike in three training operators, written once:
// rmsnorm_backward's row factors and adamw's update, where the two differ only
// in how they split rows and elements among threads, and cross_entropy's rule
// for ignored rows. The reference is itself held to finite differences and to
// torch (reference_train_ops_test.cpp), so the CPU's arithmetic stays tested
// through it; the op cases then check the CPU's split. No state: calls on
// disjoint rows or elements may run on different threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/train_ops.h"
#include "base/check.h"

namespace sluice {

// The two factors of RMSNorm's input gradient on one row of n (RmsNormBackArgs):
//   dx += r * (dy * w) - c * x,  r = 1 / sqrt(mean(x^2) + eps),  c = r^3 * mean(dy * w * x)
// with the sums over the row in double.
struct RmsNormBackFactors {
  double r = 0;
  double c = 0;
};

inline RmsNormBackFactors rmsnorm_backward_factors(const float* x, const float* dy, const float* w, int64_t n,
                                                   float eps) {
  double ss = 0, gx = 0;
  for (int64_t i = 0; i < n; ++i) {
    ss += static_cast<double>(x[i]) * x[i];
    gx += static_cast<double>(dy[i]) * w[i] * x[i];
  }
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
  return {.r = r, .c = r * r * r * gx / static_cast<double>(n)};
}

// AdamW's bias corrections at a.step: 1 - beta1^step and 1 - beta2^step.
struct AdamWBias {
  double bc1 = 1;
  double bc2 = 1;
};

inline AdamWBias adamw_bias(const AdamWArgs& a) {
  return {.bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step)),
          .bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step))};
}

// Parameter i's AdamW update (AdamWArgs' formula) in double: m[i], v[i] and p[i]
// rewritten.
inline void adamw_update(const AdamWArgs& a, const AdamWBias& bias, int64_t i) {
  const double g = a.g[i];
  const double m = a.beta1 * static_cast<double>(a.m[i]) + (1.0 - a.beta1) * g;
  const double v = a.beta2 * static_cast<double>(a.v[i]) + (1.0 - a.beta2) * g * g;
  a.m[i] = static_cast<float>(m);
  a.v[i] = static_cast<float>(v);
  double p = a.p[i];
  p -= static_cast<double>(a.lr) * a.weight_decay * p;
  p -= a.lr * (m / bias.bc1) / (std::sqrt(v / bias.bc2) + a.eps);
  a.p[i] = static_cast<float>(p);
}

// CrossEntropyArgs' rule for an ignored row t (target < 0), applied here: loss
// 0 and a zero gradient; true for such a row. Otherwise CHECKs that the target
// is inside the vocabulary and returns false.
inline bool cross_entropy_ignored_row(const CrossEntropyArgs& a, int64_t t) {
  const int32_t target = a.targets[t];
  if (target >= 0) {
    CHECK(target < a.n_vocab);
    return false;
  }
  a.loss[t] = 0;
  std::fill(a.logits + t * a.n_vocab, a.logits + (t + 1) * a.n_vocab, 0.0f);
  return true;
}

}  // namespace sluice
