// The AVX2 and AVX-512 levels of the training kernels (train_gemm.h) but for
// the vector width, written once over a level's vector struct V
// (vec_math_simd.h).
// Included by train_gemm_avx2.cpp and train_gemm_avx512.cpp, each compiling it
// for its level (internal linkage); include it nowhere else.
//
// tile(): 6 rows x 2 kLanes columns of C in twelve accumulators. Per kk, two
// loads of the B strip, six broadcasts of the A panel and twelve FMAs: the
// two FMA ports stay busy with loads to spare.
//
//        bp[kk]:  [ b0 (kLanes) | b1 (kLanes) ]
//   ap[kk][0] ->  acc[0][0]        acc[0][1]
//   ...                 += a * b
//   ap[kk][5] ->  acc[5][0]        acc[5][1]
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cpu/train_gemm.h"
#include "backend/cpu/train_panel_simd.h"

namespace sluice::cpu {
namespace {

constexpr int64_t kTrainMr = 6;

template <class V>
void tile_simd(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int64_t m, int64_t n,
               bool load_c) {
  using F = typename V::F;
  constexpr int64_t kL = V::kLanes, kNr = 2 * V::kLanes;
  // Edge tiles run through a full-size copy of their part of C.
  alignas(64) float edge[kTrainMr * kNr];
  const bool full = m == kTrainMr && n == kNr;
  float* cc = full ? c : edge;
  const int64_t ldcc = full ? ldc : kNr;
  if (!full) {
    std::fill(edge, edge + kTrainMr * kNr, 0.0f);
    if (load_c)
      for (int64_t i = 0; i < m; ++i) std::copy(c + i * ldc, c + i * ldc + n, edge + i * kNr);
  }
  F acc[kTrainMr][2];
#pragma GCC unroll 6
  for (int64_t i = 0; i < kTrainMr; ++i) {
    acc[i][0] = load_c || !full ? V::load(cc + i * ldcc) : V::zero();
    acc[i][1] = load_c || !full ? V::load(cc + i * ldcc + kL) : V::zero();
  }
  for (int64_t kk = 0; kk < k; ++kk, ap += kTrainMr, bp += kNr) {
    const F b0 = V::load(bp), b1 = V::load(bp + kL);
#pragma GCC unroll 6
    for (int64_t i = 0; i < kTrainMr; ++i) {
      const F a = V::set1(ap[i]);
      acc[i][0] = V::fmadd(a, b0, acc[i][0]);
      acc[i][1] = V::fmadd(a, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t i = 0; i < kTrainMr; ++i) {
    V::store(cc + i * ldcc, acc[i][0]);
    V::store(cc + i * ldcc + kL, acc[i][1]);
  }
  if (!full)
    for (int64_t i = 0; i < m; ++i) std::copy(edge + i * kNr, edge + i * kNr + n, c + i * ldc);
}

// Floats summed in double: the low and high halves of each vector widened
// into two accumulators of kLanes / 2 lanes; total() adds them, then folds.
template <class V>
struct SumPd {
  typename V::D s0{}, s1{};
  void add(typename V::F e) {
    s0 = s0 + V::pd_lo(e);
    s1 = s1 + V::pd_hi(e);
  }
  double total() const { return V::pd_hsum(s0 + s1); }
};

template <class V>
double exp_sum_simd(const float* x, float shift, float* out, int64_t n) {
  using F = typename V::F;
  const F sh = V::set1(shift);
  SumPd<V> s;
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    const F e = V::exp(V::sub(V::load(x + i), sh));
    V::store(out + i, e);
    s.add(e);
  }
  if (i < n) {
    const typename V::Mask mk = V::mask(n - i);
    // Masked-off lanes read as 0 and would give e^(-shift): zero them after.
    const F e = V::select(mk, V::exp(V::sub(V::load(x + i, mk), sh)), V::zero());
    V::store(out + i, mk, e);
    s.add(e);
  }
  return s.total();
}

template <class V>
float max_simd(const float* x, int64_t n) {
  using F = typename V::F;
  const F ninf = V::set1(-__builtin_inff());
  F m = ninf;
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) m = V::max(m, V::load(x + i));
  if (i < n) {
    const typename V::Mask mk = V::mask(n - i);
    m = V::max(m, V::select(mk, V::load(x + i, mk), ninf));
  }
  return V::hmax(m);
}

// tanh(y) = 1 - 2 / (e^(2y) + 1); e^(2y) saturates to 0 or a huge value, so
// the result stays in [-1, 1].
template <class V>
typename V::F tanh_simd(typename V::F y) {
  const typename V::F one = V::set1(1.0f);
  const typename V::F e = V::exp(V::add(y, y));
  return V::sub(one, V::div(V::set1(2.0f), V::add(e, one)));
}

template <class V>
void softcap_simd(float* x, int64_t n, float cap) {
  const typename V::F c = V::set1(cap), inv = V::set1(1.0f / cap);
  for (int64_t i = 0; i < n; i += V::kLanes) {
    const typename V::Mask mk = V::mask(std::min<int64_t>(V::kLanes, n - i));
    const typename V::F v = V::load(x + i, mk);
    V::store(x + i, mk, V::mul(c, tanh_simd<V>(V::mul(v, inv))));
  }
}

template <class V>
void glu_backward_simd(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n, bool gelu) {
  using F = typename V::F;
  const F one = V::set1(1.0f), two = V::set1(2.0f);
  const F k1 = V::set1(0.79788456080286535588f);
  const F k3 = V::set1(0.79788456080286535588f * 0.044715f);
  const F k3d = V::set1(3.0f * 0.79788456080286535588f * 0.044715f);
  for (int64_t i = 0; i < n; i += V::kLanes) {
    const typename V::Mask mk = V::mask(std::min<int64_t>(V::kLanes, n - i));
    const F x = V::load(g + i, mk);
    F act, deriv;
    if (!gelu) {
      const F s = V::div(one, V::add(one, V::exp(V::sub(V::zero(), x))));
      act = V::mul(x, s);
      deriv = V::mul(s, V::fmadd(x, V::sub(one, s), one));
    } else {
      // y = k1 x + k3 x^3, s = sigmoid(2y): act = x s, act' = s + 2 x s (1 - s) y'.
      const F x2 = V::mul(x, x);
      const F y = V::mul(x, V::fmadd(k3, x2, k1));
      const F s = V::div(one, V::add(one, V::exp(V::mul(V::set1(-2.0f), y))));
      const F dy = V::fmadd(k3d, x2, k1);
      act = V::mul(x, s);
      deriv = V::fmadd(V::mul(V::mul(two, act), V::sub(one, s)), dy, s);
    }
    const F h = V::load(dh + i, mk);
    V::store(dg + i, mk, V::mul(V::mul(h, V::load(u + i, mk)), deriv));
    V::store(du + i, mk, V::mul(h, act));
  }
}

// The kernels of level V, named `name`.
template <class V>
TrainKernels train_kernels_simd(const char* name) {
  constexpr int64_t kNr = 2 * V::kLanes;
  return TrainKernels{.mr = kTrainMr, .nr = kNr, .tile = tile_simd<V>, .pack_a6 = pack_a6_simd,
                      .pack_b_t = pack_b_t_simd<kNr>, .dequantize = dequantize_simd,
                      .exp_sum = exp_sum_simd<V>, .max = max_simd<V>, .softcap = softcap_simd<V>,
                      .glu_backward = glu_backward_simd<V>, .name = name};
}

}  // namespace
}  // namespace sluice::cpu
