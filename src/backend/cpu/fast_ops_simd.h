// The fast ops that are the same at the AVX2 and AVX-512 levels but for the
// vector width, written once over a level's vector struct V (vec_math_simd.h):
// rmsnorm, swiglu, geglu and add, with the operations and order of the scalar
// references per lane. rope differs by level (lane shuffles) and is each
// level's own. Include only from fast_ops_avx2.cpp and fast_ops_avx512.cpp.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/fast_ops_isa.h"
#include "backend/cpu/vec_math_simd.h"

namespace sluice::cpu::fast {

template <class V>
void rmsnorm_simd(const float* x, const float* weight, float* out, int64_t n_tokens, int64_t n, float eps) {
  using F = typename V::F;
  constexpr int64_t kL = V::kLanes;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * n;
    F s0 = V::zero(), s1 = V::zero();
    int64_t i = 0;
    for (; i + 2 * kL <= n; i += 2 * kL) {
      const F a = V::load(xt + i), b = V::load(xt + i + kL);
      s0 = V::fmadd(a, a, s0);
      s1 = V::fmadd(b, b, s1);
    }
    for (; i < n; i += kL) {
      const F a = V::load(xt + i, V::mask(n - i < kL ? n - i : kL));
      s0 = V::fmadd(a, a, s0);
    }
    const float ss = V::hsum(V::add(s0, s1)) / static_cast<float>(n);
    const F inv = V::set1(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ss + eps))));
    simd::map2<V>(xt, weight, out + t * n, n, [inv](F v, F w) { return V::mul(V::mul(v, inv), w); });
  }
}

template <class V>
void swiglu_simd(const float* gate, const float* up, float* out, int64_t n) {
  using F = typename V::F;
  simd::map2<V>(gate, up, out, n, [](F g, F u) {
    const F silu = V::div(g, V::add(V::set1(1.0f), V::exp(V::sub(V::zero(), g))));
    return V::mul(silu, u);
  });
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class V>
void geglu_simd(const float* gate, const float* up, float* out, int64_t n) {
  using F = typename V::F;
  simd::map2<V>(gate, up, out, n, [](F g, F u) {
    const F c1 = V::set1(-2.0f * 0.79788456080286535588f);
    const F c3 = V::set1(-2.0f * 0.79788456080286535588f * 0.044715f);
    const F neg2u = V::mul(g, V::fmadd(V::mul(g, g), c3, c1));
    return V::mul(V::div(g, V::add(V::set1(1.0f), V::exp(neg2u))), u);
  });
}

template <class V>
void add_simd(const float* a, const float* b, float* out, int64_t n) {
  simd::map2<V>(a, b, out, n, V::add);
}

// The table of level V with its rope.
template <class V>
constexpr LevelOps level_ops(decltype(LevelOps::rope) rope) {
  return LevelOps{.rmsnorm = rmsnorm_simd<V>, .rope = rope, .swiglu = swiglu_simd<V>, .geglu = geglu_simd<V>,
                  .add = add_simd<V>};
}

}  // namespace sluice::cpu::fast
