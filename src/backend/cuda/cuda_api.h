// The CUDA backend as the rest of the tree sees it: plain C++, no CUDA header,
// so code that is built without nvcc (tests, tools, backend.cpp) can name it.
// Every function here exists only in builds where CMake found nvcc
// (SLUICE_HAVE_CUDA); callers guard with that macro.
//
// Memory from device_alloc() is GPU memory: the host never dereferences it;
// copy_to_device / copy_to_host move bytes and return when the copy is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/op_types.h"
#include "sluice/status.h"

namespace sluice {
class Backend;
}

namespace sluice::cuda {

// Whether a CUDA device can be used; when not, *why says why (no driver, no
// device, ...). Cheap after the first call.
bool device_available(std::string* why);
// "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90" for the device in use.
std::string device_description();

void* device_alloc(size_t bytes);  // CHECK-fails when the device is out of memory
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);

// The weight types the matmul kernels read (kRows layout).
bool matmul_supports(DType type);
// For tests: y = W x with every pointer in device memory, on the default
// stream, returning when y is written.  x: [n_tok, w.n_in]  y: [n_tok, w.n_out]
void matmul_sync(const WeightView& w, const float* x, int64_t n_tok, float* y);

// The device's copy bandwidths, medians of timed copies of `bytes`:
//   d2d: a device-to-device copy, counting bytes read plus bytes written (the
//        decode roof: a matmul reads its weights at most this fast);
//   h2d_pinned / h2d_pageable: host to device from pinned / ordinary memory
//        (the pageable one only when asked; 0 otherwise).
struct CopyBandwidth {
  double d2d_gbps = 0;
  double h2d_pinned_gbps = 0;
  double h2d_pageable_gbps = 0;
};
CopyBandwidth measure_copy_bandwidth(size_t bytes = size_t{1} << 30, int reps = 10, bool with_pageable = true);

// TFLOP/s of cuBLASLt's BF16 GEMM at y[n_tok, n_out] = x[n_tok, n_in] W^T
// (float sums and output; random operands), the ceiling of the tensor-core
// matmuls of prefill (cuda_prefill.h): median of 5 timed runs of `reps`
// calls. 0 when cuBLASLt is unavailable.
double measure_gemm_bf16_tflops(int64_t n_tok, int64_t n_in, int64_t n_out, int reps = 20);

struct CudaBackendOptions {
  int device = 0;
  uint64_t budget_bytes = 0;  // device memory for weights (BackendOptions::device_budget_bytes)
};
// Errors: no usable device (the message says why).
StatusOr<std::shared_ptr<Backend>> create_cuda_backend(const CudaBackendOptions& options);

}  // namespace sluice::cuda
