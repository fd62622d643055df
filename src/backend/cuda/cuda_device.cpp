// The device-level entry points of cuda_api.h: whether a GPU is usable, plain
// copies, and the backend's factory.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.cuh"

namespace sluice::cuda {

bool device_available(std::string* why) {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return fmt::format("no usable CUDA driver or device ({})", cudaGetErrorString(e));
    if (n == 0) return std::string("no CUDA device");
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return std::string("cannot read the CUDA device's properties");
    if (p.major < 8) return fmt::format("{} is sm_{}{}; the cuda backend is built for sm_80 and newer", p.name, p.major, p.minor);
    return std::string();
  }();
  if (why) *why = reason;
  return reason.empty();
}

std::string device_description() {
  int dev = 0;
  SLUICE_CUDA_OK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  SLUICE_CUDA_OK(cudaGetDeviceProperties(&p, dev));
  return fmt::format("{}, {} SMs, {:.1f} GiB, sm_{}{}", p.name, p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (1 << 30), p.major, p.minor);
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  SLUICE_CUDA_OK(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* p) { SLUICE_CUDA_OK(cudaFree(p)); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  SLUICE_CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  SLUICE_CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

CopyBandwidth measure_copy_bandwidth(size_t bytes, int reps, bool with_pageable) {
  void *src = nullptr, *dst = nullptr, *pinned = nullptr;
  SLUICE_CUDA_OK(cudaMalloc(&src, bytes));
  SLUICE_CUDA_OK(cudaMalloc(&dst, bytes));
  SLUICE_CUDA_OK(cudaMallocHost(&pinned, bytes));
  // Not zeros: real bytes everywhere.
  auto* pin = static_cast<uint8_t*>(pinned);
  std::memset(pin, 0, bytes);
  for (size_t i = 0; i < bytes; i += 4096) pin[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  SLUICE_CUDA_OK(cudaMemcpy(src, pinned, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  cudaEvent_t t0, t1;
  SLUICE_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  SLUICE_CUDA_OK(cudaEventCreate(&t0));
  SLUICE_CUDA_OK(cudaEventCreate(&t1));
  auto median_gbps = [&](void* d, const void* from, cudaMemcpyKind kind, double counted) {
    std::vector<double> gbps;
    for (int r = -1; r < reps; ++r) {  // one warm-up
      SLUICE_CUDA_OK(cudaEventRecord(t0, s));
      SLUICE_CUDA_OK(cudaMemcpyAsync(d, from, bytes, kind, s));
      SLUICE_CUDA_OK(cudaEventRecord(t1, s));
      SLUICE_CUDA_OK(cudaEventSynchronize(t1));
      float ms = 0;
      SLUICE_CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
      if (r >= 0) gbps.push_back(counted / (static_cast<double>(ms) * 1e6));
    }
    std::sort(gbps.begin(), gbps.end());
    return gbps[gbps.size() / 2];
  };
  CopyBandwidth b;
  b.d2d_gbps = median_gbps(dst, src, cudaMemcpyDeviceToDevice, 2.0 * static_cast<double>(bytes));
  b.h2d_pinned_gbps = median_gbps(dst, pinned, cudaMemcpyHostToDevice, static_cast<double>(bytes));
  if (with_pageable) {
    const std::vector<uint8_t> pageable(pin, pin + bytes);
    b.h2d_pageable_gbps = median_gbps(dst, pageable.data(), cudaMemcpyHostToDevice, static_cast<double>(bytes));
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
  cudaFree(src);
  cudaFree(dst);
  return b;
}

StatusOr<std::shared_ptr<Backend>> create_cuda_backend(const CudaBackendOptions& o) {
  std::string why;
  if (!device_available(&why)) return not_found("cuda backend: {}", why);
  int n = 0;
  SLUICE_CUDA_OK(cudaGetDeviceCount(&n));
  if (o.device < 0 || o.device >= n) return invalid_argument("cuda device {} does not exist ({} found)", o.device, n);
  return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(o.device, o.budget_bytes));
}

}  // namespace sluice::cuda
