// GEMMs on cuBLASLt from the CUDA toolkit, products summed in float and the
// output written as float: BF16 operands for the tensor-core matmul path
// (cuda_prefill.h: y = W x going forward, dx = W^T dy for training's input
// gradient through a frozen matrix), F32 ones for training's adapter
// gradients (cuda_train_ops.h; CUBLAS_COMPUTE_32F: no TF32 rounding).
//
// One handle and one workspace per GemmLt. The layouts, the operation
// descriptor and the algorithm cuBLASLt's heuristic picks are kept per shape
// (types, transposes, sizes, strides, pointer alignments), so a shape seen
// before costs one cublasLtMatmul call; the first call of a shape allocates
// its descriptors (host memory).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/cublaslt_api.h"
#include "sluice/status.h"

namespace sluice::cuda {

class GemmLt {
 public:
  // Errors: cuBLASLt does not load (cublaslt_api()) or initialise (no usable
  // device).
  static StatusOr<std::unique_ptr<GemmLt>> create();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;
  ~GemmLt();

  // One GEMM, every matrix row-major with `ld` elements from one row to the next:
  //   c[i][j] = alpha * sum_l op(x)[i][l] * op(y)[l][j] + beta * c[i][j]
  //   op(x): [m, k], x itself [m, k], or [k, m] with trans_x; op(y): [k, n] likewise.
  // x and y are both of `type` (BF16 or F32), c is F32 (read only when beta != 0).
  struct Gemm {
    cudaDataType type = CUDA_R_16BF;
    int64_t m = 0, n = 0, k = 0;
    const void* x = nullptr;
    int64_t ldx = 0;
    bool trans_x = false;
    const void* y = nullptr;
    int64_t ldy = 0;
    bool trans_y = false;
    float* c = nullptr;
    int64_t ldc = 0;
    float alpha = 1.0f, beta = 0.0f;
  };
  // Plans g (its shape, strides and the alignment of its pointers): what
  // run() does first, for a caller that must know before it enqueues
  // anything. Errors: cuBLASLt refused the shape (the message names the
  // call, the shape and cuBLAS's status).
  Status plan(const Gemm& g);
  // g enqueued on s; a shape planned before costs one cublasLtMatmul call.
  // Pointers at least 2 (BF16) or 4 (F32) bytes aligned (CHECKed). Errors:
  // as plan(), or the launch failed.
  Status run(const Gemm& g, cudaStream_t s);
  // run() for a caller that planned g and may have enqueued work already
  // (earlier slices or GEMMs): a failure now is a launch's, with nothing to
  // fall back to, so it aborts with cuBLAS's message (and `hint`).
  void run_planned(const Gemm& g, cudaStream_t s, const char* hint = "");

  // The forward's GEMM: y[t][o] = sum_i w[o][i] * x[t][i], enqueued on s.
  //   w: [n_out, n_in] bf16   x: [n_tok, n_in] bf16   y: [n_tok, y_stride] f32 (y_stride >= n_out)
  Status run(const uint16_t* w, const uint16_t* x, float* y, int64_t n_out, int64_t n_in, int64_t n_tok,
             int64_t y_stride, cudaStream_t s);

 private:
  GemmLt() = default;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // type, trans_x, trans_y, m, n, k, ldx, ldy, ldc, and the alignments of x, y and c.
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int>;
  static Key key_of(const Gemm& g);
  StatusOr<const Plan*> plan_of(const Gemm& g);
  Status error(const char* call, cublasStatus_t st, const Gemm& g) const;
  void destroy(Plan& p);

  const CublasLtApi* lt_ = nullptr;  // set by create()
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace sluice::cuda
