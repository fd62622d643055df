// The scalar level of the training kernels, the level table, packing and the
// blocked drivers of train_gemm.h.
#include "backend/cpu/train_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"

namespace sluice::cpu {
namespace {

constexpr int64_t kScalarMr = 4;
constexpr int64_t kScalarNr = 8;

void tile_scalar(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int64_t m, int64_t n,
                 bool load_c) {
  float acc[kScalarMr][kScalarNr] = {};
  if (load_c)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[i][j] = c[i * ldc + j];
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* a = ap + kk * kScalarMr;
    const float* b = bp + kk * kScalarNr;
    for (int64_t i = 0; i < kScalarMr; ++i)
      for (int64_t j = 0; j < kScalarNr; ++j) acc[i][j] += a[i] * b[j];
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = acc[i][j];
}

bool dequantize_scalar(DType, const uint8_t*, int64_t, float*) { return false; }

double exp_sum_scalar(const float* x, float shift, float* out, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (out[i] = std::exp(x[i] - shift));
  return sum;
}

float max_scalar(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

void softcap_scalar(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void glu_backward_scalar(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                         bool gelu) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    float act, deriv;
    if (!gelu) {
      const float s = 1.0f / (1.0f + std::exp(-x));
      act = x * s;
      deriv = s * (1.0f + x * (1.0f - s));
    } else {
      // tanh(y) = 2 sigmoid(2y) - 1, so act = x sigmoid(2y) and
      // act' = sigmoid(2y) + 2 x sigmoid(2y) (1 - sigmoid(2y)) y'.
      const float y = kSqrt2OverPi * (x + 0.044715f * x * x * x);
      const float s = 1.0f / (1.0f + std::exp(-2.0f * y));
      act = x * s;
      deriv = s + 2.0f * x * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    }
    dg[i] = dh[i] * u[i] * deriv;
    du[i] = dh[i] * act;
  }
}

TrainKernels train_kernels_scalar() {
  return TrainKernels{.mr = kScalarMr,
                      .nr = kScalarNr,
                      .tile = tile_scalar,
                      .dequantize = dequantize_scalar,
                      .exp_sum = exp_sum_scalar,
                      .max = max_scalar,
                      .softcap = softcap_scalar,
                      .glu_backward = glu_backward_scalar,
                      .name = "scalar"};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row stride of gemm_parallel's copy of a C block: not a power of two.
constexpr int64_t kCbStride = kGemmNc + 16;

}  // namespace

const TrainKernels& train_kernels(Isa isa) {
  CHECK(static_cast<int>(isa) <= static_cast<int>(max_supported_isa()));
  // Each level's table is built on first use only: the SIMD files' code (their
  // table constructors included) may run only on a CPU that has the level.
  switch (isa) {
    case Isa::kAvx512: {
      static const TrainKernels k = train_kernels_avx512();
      return k;
    }
    case Isa::kAvx2: {
      static const TrainKernels k = train_kernels_avx2();
      return k;
    }
    case Isa::kScalar: break;
  }
  static const TrainKernels k = train_kernels_scalar();
  return k;
}

void pack_a(const TrainKernels& kn, const StridedMatrix& a, int64_t i0, int64_t m, int64_t k0, int64_t k, float* ap) {
  const int64_t mr = kn.mr;
  CHECK(mr <= 8);
  for (int64_t p = 0; p < m; p += mr, ap += mr * k) {
    const int64_t rows = std::min(mr, m - p);
    const float* src[8];
    for (int64_t i = 0; i < rows; ++i) src[i] = a.p + (i0 + p + i) * a.rs + k0 * a.cs;
    if (kn.pack_a6 != nullptr && rows == mr && a.cs == 1) {
      kn.pack_a6(src, k, a.scale, ap);
      continue;
    }
    // Written in order, read from mr row streams; rows past m are zeros.
    float* dst = ap;
    for (int64_t kk = 0; kk < k; ++kk, dst += mr) {
      const int64_t off = kk * a.cs;
      for (int64_t i = 0; i < rows; ++i) dst[i] = src[i][off];
      for (int64_t i = rows; i < mr; ++i) dst[i] = 0.0f;
    }
    if (a.scale != 1.0f)
      for (int64_t e = 0; e < mr * k; ++e) ap[e] *= a.scale;
  }
}

void pack_b(const TrainKernels& kn, const StridedMatrix& b, int64_t k0, int64_t k, int64_t j0, int64_t n, float* bp) {
  if (b.rs == 1 && b.cs != 1 && kn.pack_b_t != nullptr) {  // rows of B^T: transpose in vectors
    kn.pack_b_t(b.p + k0 + j0 * b.cs, b.cs, k, n, bp);
    return;
  }
  const int64_t nr = kn.nr;
  for (int64_t s = 0; s < n; s += nr, bp += nr * k) {
    const int64_t cols = std::min(nr, n - s);
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* src = b.p + (k0 + kk) * b.rs + (j0 + s) * b.cs;
      float* dst = bp + kk * nr;
      if (b.cs == 1) {
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];  // short rows: no memcpy call
      } else {
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j * b.cs];
      }
      for (int64_t j = cols; j < nr; ++j) dst[j] = 0.0f;
    }
  }
}

void gemm_packed(const TrainKernels& kn, int64_t m, int64_t n, int64_t k, const float* ap, const float* bp, float* c,
                 int64_t ldc, bool load_c) {
  for (int64_t s = 0; s < n; s += kn.nr) {
    const float* strip = bp + s / kn.nr * kn.nr * k;
    for (int64_t p = 0; p < m; p += kn.mr) {
      kn.tile(k, ap + p / kn.mr * kn.mr * k, strip, c + p * ldc + s, ldc, std::min(kn.mr, m - p),
              std::min(kn.nr, n - s), load_c);
    }
  }
}

void gemm_parallel(const TrainKernels& kn, ThreadPool& pool, int64_t m, int64_t n, int64_t k, const StridedMatrix& a,
                   PanelFn panel, float* c, int64_t ldc, bool accumulate, float* scratch) {
  CHECK(kGemmNc % kn.nr == 0 && kGemmMc % kn.mr == 0);
  if (m <= 0 || n <= 0) return;
  // Output blocks: kGemmNc columns by a share of the rows. Splitting the rows
  // repeats the B panels' packing (dequantization, for matmul_t), so they are
  // split only as far as it takes to give every thread about four blocks.
  const int nt = pool.n_threads();
  const int64_t n_col = ceil_div(n, kGemmNc);
  const int64_t max_row_splits = std::max<int64_t>(1, ceil_div(m, 4 * kn.mr));
  const int64_t row_splits = std::clamp<int64_t>(ceil_div(4 * nt, n_col), 1, max_row_splits);
  const int64_t rows_per = ceil_div(ceil_div(m, row_splits), kn.mr) * kn.mr;
  const int64_t n_blocks = n_col * ceil_div(m, rows_per);
  std::atomic<int64_t> next{0};
  pool.run_on_all([&](int ti, int) {
    float* bp = scratch + static_cast<size_t>(ti) * kGemmScratchFloats;
    float* ap = bp + kGemmKs * kGemmNc;
    float* cb = ap + kGemmMc * kGemmKc + 64;
    for (;;) {
      const int64_t blk = next.fetch_add(1, std::memory_order_relaxed);
      if (blk >= n_blocks) return;
      const int64_t j0 = blk % n_col * kGemmNc, nb = std::min(kGemmNc, n - j0);
      const int64_t r0 = blk / n_col * rows_per, r1 = std::min(m, r0 + rows_per);
      if (k == 0 && !accumulate) {
        for (int64_t r = r0; r < r1; ++r) std::fill(c + r * ldc + j0, c + r * ldc + j0 + nb, 0.0f);
      }
      // The B panels of up to kGemmKs rows of k, then every row block of C
      // through all of them (the C block stays in L2 across the k chunks).
      for (int64_t ks = 0; ks < k; ks += kGemmKs) {
        const int64_t ke = std::min(k, ks + kGemmKs);
        for (int64_t k0 = ks; k0 < ke; k0 += kGemmKc)
          panel(ti, k0, std::min(kGemmKc, ke - k0), j0, nb, bp + (k0 - ks) * kGemmNc);
        for (int64_t i0 = r0; i0 < r1; i0 += kGemmMc) {
          const int64_t mc = std::min(kGemmMc, r1 - i0);
          // The C block in a contiguous copy: C's own rows may lie a power of
          // two apart, which would fold them onto a few cache sets.
          const bool load = accumulate || ks > 0;
          if (load)
            for (int64_t i = 0; i < mc; ++i) std::copy(c + (i0 + i) * ldc + j0, c + (i0 + i) * ldc + j0 + nb, cb + i * kCbStride);
          for (int64_t k0 = ks; k0 < ke; k0 += kGemmKc) {
            const int64_t kc = std::min(kGemmKc, ke - k0);
            pack_a(kn, a, i0, mc, k0, kc, ap);
            gemm_packed(kn, mc, nb, kc, ap, bp + (k0 - ks) * kGemmNc, cb, kCbStride, load || k0 > ks);
          }
          for (int64_t i = 0; i < mc; ++i) std::copy(cb + i * kCbStride, cb + i * kCbStride + nb, c + (i0 + i) * ldc + j0);
        }
      }
    }
  });
}

void gemm_parallel(const TrainKernels& kn, ThreadPool& pool, int64_t m, int64_t n, int64_t k, const StridedMatrix& a,
                   const StridedMatrix& b, float* c, int64_t ldc, bool accumulate, float* scratch) {
  gemm_parallel(kn, pool, m, n, k, a,
                [&](int, int64_t k0, int64_t kc, int64_t j0, int64_t nb, float* bp) { pack_b(kn, b, k0, kc, j0, nb, bp); },
                c, ldc, accumulate, scratch);
}

}  // namespace sluice::cpu
