// Programmatic dependent launch (Hopper, sm_90): in decode every kernel is
// short, and each matmul would otherwise start only once the kernel before it
// has drained, then wait a memory round trip for its first weights. A matmul
// launched with launch_pdl may start while the kernel before it still runs:
// it issues its first weight loads (weights are never written by a kernel),
// then pdl_wait() blocks until that kernel has finished and its writes are
// visible, and only then reads x or writes y. The kernels that precede a
// matmul call pdl_trigger() at their start, which lets it be scheduled as soon
// as all of their blocks are running.
//
// Below sm_90 both are no-ops and the launch is an ordinary one;
// SLUICE_CUDA_PDL=0 turns the early start off (the A/B in scripts/cuda-check).
#pragma once

#include <cstdlib>
#include <cstring>
#include <utility>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.cuh"

namespace sluice::cuda {

// Blocks until the kernel before this one (when launched with launch_pdl) has
// completed and its memory is visible; returns at once otherwise.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel (if launched with launch_pdl) be scheduled early.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// While one of these lives on a thread, launch_pdl launches plainly there:
// the backend holds one around matmuls whose weights a copy on another stream
// has just brought in (cuda_weight_ring.h), so that their first weight loads
// come after that copy by the simplest rule there is.
inline thread_local int pdl_blocked = 0;
struct PdlBlock {
  PdlBlock() { ++pdl_blocked; }
  ~PdlBlock() { --pdl_blocked; }
  PdlBlock(const PdlBlock&) = delete;
  PdlBlock& operator=(const PdlBlock&) = delete;
};

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_CUDA_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// kernel<<<grid, block, 0, s>>>(args...), allowed to start before the previous
// kernel in the stream completes. The kernel must call pdl_wait() before it
// touches anything an earlier kernel writes.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl_enabled() && pdl_blocked == 0 ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  SLUICE_CUDA_OK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace sluice::cuda
