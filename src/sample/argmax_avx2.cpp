// AVX2 argmax over logits (this file is compiled with -mavx2).
#include <immintrin.h>

#include <limits>

#include "sample/argmax.h"

namespace sluice {

int32_t argmax_logits_avx2(const float* x, int32_t n) {
  // Pass 1: the maximum. vmaxps(a, b) returns b when either is NaN, so with
  // the running maximum as b a NaN element is skipped and m is never NaN.
  const float kNegInf = -std::numeric_limits<float>::infinity();
  __m256 m0 = _mm256_set1_ps(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
  __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float best = _mm_cvtss_f32(h);
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  if (!(best > kNegInf)) return 0;  // nothing above -inf: the scan keeps index 0

  // Pass 2: the first index holding it (NaN never compares equal).
  const __m256 b = _mm256_set1_ps(best);
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), b, _CMP_EQ_OQ));
    if (mask != 0) return j + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; j < n; ++j)
    if (x[j] == best) return j;
  return 0;  // unreachable: best is one of the x[j]
}

}  // namespace sluice
