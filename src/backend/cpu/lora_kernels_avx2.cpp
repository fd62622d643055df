// AVX2 + FMA LoRA kernels (compiled with -mavx2 -mfma; called only when the
// CPU has them). The accumulation order is lora_kernels.h's.
#include <immintrin.h>

#include "backend/cpu/lora_kernels.h"
#include "backend/cpu/vec_math_avx2.h"

namespace sluice::cpu {
namespace {

using avx2::hsum;
using avx2::hsum8x8;

// Lane masks for the first k <= 8 lanes: load 8 ints at kTailMask + 8 - k.
alignas(32) const int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

__m256i tail_mask(int64_t k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - k)); }

// s[j] += rows[j][i .. i+8) * xv for the rows of one group.
template <int N>
inline void fma_rows(const float* const (&rows)[N], int64_t i, __m256 xv, __m256 (&s)[N]) {
  for (int j = 0; j < N; ++j) s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(rows[j] + i), xv, s[j]);
}

template <int N>
inline void fma_rows_masked(const float* const (&rows)[N], int64_t i, __m256i m, __m256 xv, __m256 (&s)[N]) {
  for (int j = 0; j < N; ++j) s[j] = _mm256_fmadd_ps(_mm256_maskload_ps(rows[j] + i, m), xv, s[j]);
}

// s[j] = m[row0 + j] . v for N rows of m ([.., n] floats), one accumulator
// each, v loaded once per step for all.
template <int N>
inline void row_dots(const float* m, int64_t n, int64_t row0, const float* v, __m256 (&s)[N]) {
  const float* rows[N];
  for (int j = 0; j < N; ++j) {
    rows[j] = m + (row0 + j) * n;
    s[j] = _mm256_setzero_ps();
  }
  const int64_t n_full = n / 8 * 8;
  for (int64_t i = 0; i < n_full; i += 8) fma_rows(rows, i, _mm256_loadu_ps(v + i), s);
  if (n_full < n) {
    const __m256i mask = tail_mask(n - n_full);
    fma_rows_masked(rows, n_full, mask, _mm256_maskload_ps(v + n_full, mask), s);
  }
}

// u[r0 + j] = A[r0 + j] . x for N rows at once.
template <int N>
inline void down_rows(const float* a, const float* x, int64_t n_in, int64_t r0, float* u) {
  __m256 s[N];
  row_dots<N>(a, n_in, r0, x, s);
  for (int j = 0; j < N; ++j) u[r0 + j] = hsum(s[j]);
}

}  // namespace

void lora_down_avx2(const float* a, const float* x, int64_t n_in, int64_t r0, int64_t r1, float* u) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) down_rows<4>(a, x, n_in, r, u);
  for (; r < r1; ++r) down_rows<1>(a, x, n_in, r, u);
}

void lora_up_avx2(const float* b, const float* u, int64_t rank, float scale, int64_t o0, int64_t o1, float* y) {
  const __m256 vscale = _mm256_set1_ps(scale);
  int64_t o = o0;
  for (; o + 8 <= o1; o += 8) {
    __m256 s[8];
    row_dots<8>(b, rank, o, u, s);
    const __m256 sums = hsum8x8(s);
    _mm256_storeu_ps(y + o, _mm256_add_ps(_mm256_loadu_ps(y + o), _mm256_mul_ps(vscale, sums)));
  }
  for (; o < o1; ++o) {
    __m256 s[1];
    row_dots<1>(b, rank, o, u, s);
    y[o] += scale * hsum(s[0]);
  }
}

}  // namespace sluice::cpu
