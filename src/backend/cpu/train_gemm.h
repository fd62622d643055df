// Dense f32 matrix products for the training operators (matmul_t, attention,
// the LoRA gradients), and the per-level vector helpers they share.
//
//   C[m, n] (+)= A[m, k] B[k, n]
//
// Both operands are first copied into register-tile order ("packed"), so the
// innermost kernel reads two sequential streams however A and B lie in memory
// (transposed, strided, or dequantized on the fly from a weight matrix):
//
//   A panel (mr rows):  ap[kk * mr + i]  = A[i0 + i][k0 + kk]   rows past m are 0
//   B strip (nr cols):  bp[kk * nr + j]  = B[k0 + kk][j0 + j]   cols past n are 0
//
//   packed A block: ceil(m / mr) panels of k * mr floats, one after another
//   packed B panel: ceil(n / nr) strips of k * nr floats, one after another
//
// tile() multiplies one A panel by one B strip into an mr x nr block of C
// held in registers: for every element, one fused multiply-add chain over kk
// in ascending order, started from C (load_c) or from zero. So an element of C
// is the same chain whatever the tile shape, the edges, the k chunking (a
// later chunk loads what the earlier one stored) or the thread that ran it:
// every result here is bit-identical from run to run and for any thread count.
//
// Levels: scalar (4 x 8 tiles, multiply then add), AVX2 (6 x 16: twelve
// 8-lane accumulators), AVX-512 (6 x 32: the same twelve accumulators, 16
// lanes wide). Results agree across levels to rounding, not bit for bit.
// Everything here is pure apart from its outputs and thread-safe on disjoint
// outputs; nothing allocates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "base/function_ref.h"
#include "base/thread_pool.h"
#include "quant/dtype.h"

namespace sluice::cpu {

struct TrainKernels {
  int64_t mr = 0;  // rows of a register tile
  int64_t nr = 0;  // columns of a register tile
  // c[i * ldc + j] for i < m <= mr, j < n <= nr:
  //   (load_c ? c : 0) + sum over kk < k of ap[kk * mr + i] * bp[kk * nr + j]
  // as one fused chain in kk order (scalar: multiply, then add).
  void (*tile)(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int64_t m, int64_t n,
               bool load_c) = nullptr;
  // A panel of 6 rows (mr == 6 only, else null): ap[kk * 6 + i] = row[i][kk] *
  // scale for kk < k; writes up to 2 floats past ap + 6 k.
  void (*pack_a6)(const float* const* row, int64_t k, float scale, float* ap) = nullptr;
  // A B panel of B = S^T, S: [n rows of ld floats] x k (keys as columns):
  // bp[s * k + kk * nr + j] = S[s + j][kk] per strip start s, zero past n.
  // Null: pack_b gathers element by element.
  void (*pack_b_t)(const float* s, int64_t ld, int64_t k, int64_t n, float* bp) = nullptr;
  // dst[0 .. nb * block_size) = nb consecutive GGUF blocks of `type` at src,
  // bit-identical to dequantize_row. False (nothing written) when the level
  // has no vector path for the type; the caller then uses dequantize_row.
  bool (*dequantize)(DType type, const uint8_t* src, int64_t nb, float* dst) = nullptr;
  // out[i] = e^(x[i] - shift) (out may alias x); returns sum_i out[i],
  // summed in double in a fixed order. e^(-inf) is 0.
  double (*exp_sum)(const float* x, float shift, float* out, int64_t n) = nullptr;
  // max_i x[i] (-inf for n == 0; NaN-free input).
  float (*max)(const float* x, int64_t n) = nullptr;
  // x[i] = cap * tanh(x[i] / cap), cap > 0.
  void (*softcap)(float* x, int64_t n, float cap) = nullptr;
  // GluBackArgs over n elements: dg = dh * u * act'(g), du = dh * act(g);
  // gelu: the tanh approximation.
  void (*glu_backward)(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                       bool gelu) = nullptr;
  const char* name = "";
};

// The kernels of a level (at most max_supported_isa()).
const TrainKernels& train_kernels(Isa isa);
TrainKernels train_kernels_avx2();    // train_gemm_avx2.cpp
TrainKernels train_kernels_avx512();  // train_gemm_avx512.cpp

// A matrix operand read through strides: element (i, j) at p[i * rs + j * cs],
// times `scale` when packed (A operands only).
struct StridedMatrix {
  const float* p = nullptr;
  int64_t rs = 0;
  int64_t cs = 1;
  float scale = 1.0f;
};

// Packs rows [i0, i0 + m) x columns [k0, k0 + k) of a as an A block (above).
//   ap: [ceil(m / mr) * mr * k + kPackSlackFloats]
void pack_a(const TrainKernels& kn, const StridedMatrix& a, int64_t i0, int64_t m, int64_t k0, int64_t k, float* ap);
// Packs rows [k0, k0 + k) x columns [j0, j0 + n) of b as a B panel (above).
//   bp: [ceil(n / nr) * nr * k]
void pack_b(const TrainKernels& kn, const StridedMatrix& b, int64_t k0, int64_t k, int64_t j0, int64_t n, float* bp);

// C[m, n] (+)= packed A block (m x k) * packed B panel (k x n), tile by tile:
// B strips outer (one stays in L1 while every A panel passes), A panels inner.
//   c: [m rows of ldc floats]
void gemm_packed(const TrainKernels& kn, int64_t m, int64_t n, int64_t k, const float* ap, const float* bp, float* c,
                 int64_t ldc, bool load_c);

// Blocking of gemm_parallel: n in blocks of kGemmNc columns (a multiple of
// every level's nr and of every block size), k in spans of kGemmKs rows whose
// B panels (kGemmKc rows each) are packed once and then used by every row
// block of kGemmMc (a multiple of every level's mr) in turn, so a row block
// of C stays in L2 across a whole span.
constexpr int64_t kGemmKc = 256;
constexpr int64_t kGemmNc = 256;
constexpr int64_t kGemmMc = 96;
constexpr int64_t kGemmKs = 2048;

// Per-thread scratch gemm_parallel needs, in floats.
constexpr size_t kGemmScratchFloats = kGemmKs * kGemmNc + kGemmMc * kGemmKc + 64 + kGemmMc * (kGemmNc + 16);
// Floats a packed A block may be written past its end (pack_a6).
constexpr int64_t kPackSlackFloats = 8;

// Writes rows [k0, k0 + k) x columns [j0, j0 + n) of the B operand as a packed
// B panel (pack_b's layout) into bp. k <= kGemmKc, n <= kGemmNc, j0 a multiple
// of kGemmNc; thread is the calling thread's index in the pool (its scratch).
using PanelFn = FunctionRef<void(int thread, int64_t k0, int64_t k, int64_t j0, int64_t n, float* bp)>;

// C[m, n] = (accumulate ? C : 0) + A[m, k] B[k, n] on every thread of the
// pool: the output is cut into blocks (kGemmNc columns x a share of the rows)
// that threads claim in turn; each block takes its k chunks in order. B comes
// from `panel`, A through strides.
//   c: [m rows of ldc floats];  scratch: [pool.n_threads() * kGemmScratchFloats], 64-byte aligned
void gemm_parallel(const TrainKernels& kn, ThreadPool& pool, int64_t m, int64_t n, int64_t k, const StridedMatrix& a,
                   PanelFn panel, float* c, int64_t ldc, bool accumulate, float* scratch);
// The same with B through strides too.
void gemm_parallel(const TrainKernels& kn, ThreadPool& pool, int64_t m, int64_t n, int64_t k, const StridedMatrix& a,
                   const StridedMatrix& b, float* c, int64_t ldc, bool accumulate, float* scratch);

}  // namespace sluice::cpu
