// The BF16 GEMM of the tensor-core matmul path (cuda_prefill.h), on cuBLASLt
// from the CUDA toolkit: y = W x with W and x in BF16, products summed in
// float, y written as float.
//
// One handle and one workspace per GemmLt (per backend). The layouts, the
// operation descriptor and the algorithm cuBLASLt's heuristic picks are kept
// per shape (n_out, n_in, n_tok, y stride, pointer alignments), so a shape
// seen before costs one cublasLtMatmul call; the first call of a shape
// allocates its descriptors (host memory).
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

  // y[t][o] = sum_i w[o][i] * x[t][i], enqueued on s.
  //   w: [n_out, n_in] bf16   x: [n_tok, n_in] bf16   y: [n_tok, y_stride] f32 (y_stride >= n_out)
  // w and x 16-byte aligned, y 4-byte aligned (CHECKed). Errors: cuBLASLt
  // refused the shape or failed to launch (the message names the call, the
  // shape and cuBLAS's status).
  Status run(const uint16_t* w, const uint16_t* x, float* y, int64_t n_out, int64_t n_in, int64_t n_tok,
             int64_t y_stride, cudaStream_t s);

 private:
  GemmLt() = default;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int>;  // n_out, n_in, n_tok, y_stride, y alignment
  StatusOr<const Plan*> plan(const Key& key);
  void destroy(Plan& p);

  const CublasLtApi* lt_ = nullptr;  // set by create()
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
};

}  // namespace sluice::cuda
