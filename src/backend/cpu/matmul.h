// Matrix multiplication with dequantization fused into the inner loop.
//
//   y[t][r] = sum_i W[r][i] * x[t][i]     W: [n_out, n_in] of w.type (GGUF rows)
//
// Two steps, so activations are converted once per matmul, not once per row:
//   1. convert_act(): each token's f32 activations -> the "activation format"
//      the kernel for (w.type, isa) consumes: f32, bf16, or 8-bit blocks with
//      scales (and block sums) for integer dot products on quantized weights.
//   2. rows(): y for output rows [r0, r1) and all n_tok tokens. A thread pool
//      calls it with disjoint row ranges.
//
// Contract every kernel keeps (the per-op tests check it bit for bit):
//   - y[t][r] depends only on row r and token t: the same bits whatever n_tok,
//     whatever r0/r1 split, whatever tile the token falls in. So decoding token by
//     token equals one prefill, and the thread count does not change results.
//   - rows() reads only rows [r0, r1) of W and writes only y[t][r0..r1).
//   - No allocation, no locks: scratch lives on the stack or in the act buffer.
// Each (type, isa) has a scalar reference (quant/quant.h dot_row) it is tested
// against by normalized error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/rows_fn.h"
#include "backend/op_types.h"
#include "base/function_ref.h"
#include "base/thread_pool.h"
#include "quant/dtype.h"

namespace sluice::cpu {

// The shared operator types (backend/op_types.h), under their old names here.
using ::sluice::RopeLayout;
using ::sluice::WeightLayout;
using ::sluice::WeightView;

struct MatmulKernel {
  // Bytes of one token's converted activations for rows of n_in elements.
  size_t (*act_row_bytes)(int64_t n_in) = nullptr;
  // x: [n_in] f32 -> dst: act_row_bytes(n_in) bytes.
  void (*convert_act)(const float* x, void* dst, int64_t n_in) = nullptr;
  // y for output rows [r0, r1) and all tokens (rows_fn.h).
  RowsFn* rows = nullptr;
  const char* name = "";  // e.g. "q4_K/avx512-vnni"
};

// The kernel for a weight type and layout at an instruction-set level (falls
// back to the best lower level that has one; Q4_0 and Q8_0 have one on each of
// their repacked layouts). For repacked layouts rows() takes r0, r1 on the
// layout's row groups (repack.h); w_row_bytes stays the GGUF row size.
// A type in GGUF rows with no kernel at any level gets the reference kernel:
// rows == nullptr, f32 activations, which matmul_group runs through the type's
// reference dot (DTypeTraits::dot, quant/dtype.h), row by row and token by
// token. So a new quant type runs on the CPU from its traits row alone, slowly,
// until it has kernels of its own.
const MatmulKernel& matmul_kernel(DType type, Isa isa, WeightLayout layout = WeightLayout::kRows);

// Whether a kernel (not the reference fallback) multiplies weights of this
// type in GGUF rows. The training path (matmul_t) and the CUDA backend's
// question "does the CPU have kernels for it" read this.
bool matmul_supports(DType type);
// Whether matmul_group runs weights of this type in GGUF rows at all: with a
// kernel, or through the reference fallback (a type with a reference dot).
bool matmul_runs(DType type);

// Test hook: while one is alive, matmul_group multiplies weights of `type` in
// GGUF rows through the reference fallback although the type has kernels, so
// that the fallback can be tested on an existing type (one without repacked
// layouts: not Q4_0 or Q8_0). Create and destroy it while no matmul runs; one
// type at a time.
class ScopedReferenceMatmul {
 public:
  explicit ScopedReferenceMatmul(DType type);
  ~ScopedReferenceMatmul();
  ScopedReferenceMatmul(const ScopedReferenceMatmul&) = delete;
  ScopedReferenceMatmul& operator=(const ScopedReferenceMatmul&) = delete;
};

// Implemented by the kernel families; return a kernel with rows == nullptr if
// they have none for that exact (type, isa, layout).
MatmulKernel float_matmul_kernel(DType type, Isa isa);  // F32, F16, BF16 (GGUF rows)
MatmulKernel quant_matmul_kernel(DType type, Isa isa,   // every block type; the repacked layouts
                                 WeightLayout layout = WeightLayout::kRows);

// One output of a matmul group: y = w x, y: [n_tok, w.n_out].
using MatmulJob = ::sluice::MatmulOut;

// Bytes of scratch matmul_group needs for n_tok tokens of n_in activations
// (room for two activation formats, for groups mixing weight types).
size_t matmul_scratch_bytes(int64_t n_tok, int64_t n_in);

// Runs several matmuls that share one input (q/k/v; gate/up) as one parallel
// step: activations are converted once per weight type, then the rows of all
// jobs are split across the pool's threads (at multiples of 16 rows, so a
// repacked group of rows is never split).
//   x: [n_tok, n_in];  scratch: matmul_scratch_bytes(n_tok, n_in) bytes
void matmul_group(std::span<const MatmulJob> jobs, const float* x, int64_t n_in, int64_t n_tok,
                  uint8_t* scratch, ThreadPool& pool, Isa isa);
// The same with per-token work that produces x (an RMSNorm, SwiGLU) riding on
// the activation conversion's dispatch instead of one of its own:
// prepare(t0, t1) writes rows [t0, t1) of x and runs on the thread that then
// converts those rows (every row once, before any row is multiplied).
void matmul_group(std::span<const MatmulJob> jobs, const float* x, int64_t n_in, int64_t n_tok,
                  uint8_t* scratch, ThreadPool& pool, Isa isa, FunctionRef<void(int64_t, int64_t)> prepare);

}  // namespace sluice::cpu
