// SLUICE_CUDA_OK: every CUDA runtime call's return code checked. A failing
// call is a broken invariant on a device that was usable when the backend was
// created (out of memory where sizes were planned, a kernel fault), so it
// aborts with the call, file and line rather than returning a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define SLUICE_CUDA_OK(call)                                                                        \
  do {                                                                                              \
    const cudaError_t sluice_cuda_err_ = (call);                                                    \
    if (sluice_cuda_err_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s\n  in %s\n", __FILE__, __LINE__,               \
                   cudaGetErrorName(sluice_cuda_err_), cudaGetErrorString(sluice_cuda_err_), #call); \
      std::abort();                                                                                 \
    }                                                                                               \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, a fault in
// the kernel at the next synchronizing call.
#define SLUICE_CUDA_LAUNCHED() SLUICE_CUDA_OK(cudaGetLastError())
