// What the reference (reference_train_ops.cpp) and the CPU backend
// (cpu/train_ops.cpp) do alike in training operators, written once:
// rmsnorm_backward's row factors, adamw's update and the routed FFN's row
// operators (gather_rows, slot_sum, gated_add and their backwards), where the
// two differ only in how they split rows and elements among threads, and
// cross_entropy's rule for ignored rows. The reference is itself held to finite differences and to
// torch (reference_train_ops_test.cpp), so the CPU's arithmetic stays tested
// through it; the op cases then check the CPU's split. No state: calls on
// disjoint rows or elements may run on different threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/backend.h"  // shared_gate_weight
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

// ---- the routed FFN's rows: one output row each (GatherRowsArgs .. GatedAddBackArgs) ----

// Row r of gather_rows.
inline void gather_row(const GatherRowsArgs& a, int64_t r) {
  std::copy_n(a.src + int64_t{a.idx[r]} * a.n, a.n, a.dst + r * a.n);
}

// Token t of slot_sum: its slots in order, from 0.
inline void slot_sum_row(const SlotSumArgs& a, int64_t t) {
  float* o = a.out + t * a.n;
  std::fill(o, o + a.n, 0.0f);
  for (int64_t j = 0; j < a.k; ++j) {
    const float wt = a.w != nullptr ? a.w[t * a.k + j] : 1.0f;
    const float* y = a.y + int64_t{a.row[t * a.k + j]} * a.n;
    for (int64_t i = 0; i < a.n; ++i) o[i] += wt * y[i];
  }
}

// Token t of slot_sum_backward: dw[t][j] and the rows dy[row[t * k + j]].
inline void slot_sum_backward_row(const SlotSumBackArgs& a, int64_t t) {
  const SlotSumArgs& f = a.fwd;
  const float* d = a.dout + t * f.n;
  for (int64_t j = 0; j < f.k; ++j) {
    const int64_t r = f.row[t * f.k + j];
    const float* y = f.y + r * f.n;
    double dot = 0;
    for (int64_t i = 0; i < f.n; ++i) dot += static_cast<double>(d[i]) * y[i];
    a.dw[t * f.k + j] = static_cast<float>(dot);
    const float wt = f.w[t * f.k + j];
    float* dy = a.dy + r * f.n;
    for (int64_t i = 0; i < f.n; ++i) dy[i] = wt * d[i];
  }
}

// Token t of gated_add.
inline void gated_add_row(const GatedAddArgs& a, int64_t t) {
  const float s = a.gate != nullptr ? shared_gate_weight(a.gate, a.x + t * a.n, a.n) : 1.0f;
  a.s[t] = s;
  const float* y = a.y + t * a.n;
  float* o = a.out + t * a.n;
  for (int64_t i = 0; i < a.n; ++i) o[i] += s * y[i];
}

// Token t of gated_add_backward.
inline void gated_add_backward_row(const GatedAddBackArgs& a, int64_t t) {
  const GatedAddArgs& f = a.fwd;
  const float s = f.s[t];
  const float* d = a.dout + t * f.n;
  float* dy = a.dy + t * f.n;
  for (int64_t i = 0; i < f.n; ++i) dy[i] = s * d[i];
  if (f.gate == nullptr) return;
  // s = sigmoid(z), z = gate . x:  dx += (dout . y) s (1 - s) gate
  const float* y = f.y + t * f.n;
  double dot = 0;
  for (int64_t i = 0; i < f.n; ++i) dot += static_cast<double>(d[i]) * y[i];
  const auto dz = static_cast<float>(dot * s * (1.0f - s));
  float* dx = a.dx + t * f.n;
  for (int64_t i = 0; i < f.n; ++i) dx[i] += dz * f.gate[i];
}

}  // namespace sluice
