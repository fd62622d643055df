// Math written once for the AVX2 and AVX-512 levels over a level's vector
// struct V (avx2::Vec in vec_math_avx2.h, avx512::Vec in vec_math_avx512.h):
//
//   V::F, V::kLanes        the f32 vector and its lane count
//   V::Mask, V::mask(k)    lanes [0, k) on, k in 0..kLanes
//   V::zero() set1(x) load(p) store(p, v); load(p, m): lanes off m read as 0;
//   store(p, m, v): only lanes m written
//   V::select(m, on, off): on in lanes m, off elsewhere
//   V::add sub mul div max; fmadd(a, b, c) = a b + c; fnmadd(a, b, c) = c - a b
//   V::round(x) (to nearest even)  V::hsum(v)  V::hmax(v)  V::exp(x)
//   V::D: kLanes / 2 doubles; pd_lo(v), pd_hi(v): the low, high half of v
//   widened; pd_hsum(s): the lanes of s summed in a fixed order
//
// The templates are instantiated with one level's V in files compiled for that
// level only, so each level's code stays in its own files.
#pragma once

#include <cstdint>

namespace sluice::cpu::simd {

// p ~ e^r for |r| <= ln2/2, and n, with x = n ln2 + r: n = round(x log2 e),
// r = x - n ln2 in two steps (ln2 split into an exact high part and the rest),
// p the degree-7 Taylor polynomial of e^r; e^x = p 2^n, the scaling by 2^n
// (and its range) the level's.
template <class V>
inline typename V::F exp_reduced(typename V::F x, typename V::F* n) {
  *n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  typename V::F r = V::fnmadd(*n, V::set1(0.693145751953125f), x);
  r = V::fnmadd(*n, V::set1(1.428606765330187045e-06f), r);
  typename V::F p = V::set1(1.0f / 5040);
  p = V::fmadd(p, r, V::set1(1.0f / 720));
  p = V::fmadd(p, r, V::set1(1.0f / 120));
  p = V::fmadd(p, r, V::set1(1.0f / 24));
  p = V::fmadd(p, r, V::set1(1.0f / 6));
  p = V::fmadd(p, r, V::set1(0.5f));
  p = V::fmadd(p, r, V::set1(1.0f));
  return V::fmadd(p, r, V::set1(1.0f));
}

// out[i] = fn(a[i], b[i]) for i in [0, n), V::kLanes at a time; the last,
// partial vector reads its missing lanes as 0 and does not write them.
template <class V, class Fn>
[[gnu::always_inline]] inline void map2(const float* a, const float* b, float* out, int64_t n, Fn fn) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + i, fn(V::load(a + i), V::load(b + i)));
  if (i < n) {
    const typename V::Mask m = V::mask(n - i);
    V::store(out + i, m, fn(V::load(a + i, m), V::load(b + i, m)));
  }
}

}  // namespace sluice::cpu::simd
