// Helpers of the CUDA backend's tests: device buffers of host floats, random
// quantized matrices with a host and a device view, and the skip without a GPU.
// Test-only; included by the *_test.cpp files of this folder, whose tests live
// in sluice::cuda::testing.
#pragma once

#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/cuda/cuda_api.h"
#include "quant/quant.h"

namespace sluice::cuda::testing {

// The CPU tests' helpers, for the tests in this namespace.
using cpu::testing::nmse;
using cpu::testing::random_floats;

#define SKIP_WITHOUT_GPU()                               \
  do {                                                   \
    std::string why;                                     \
    if (!cuda::device_available(&why)) GTEST_SKIP() << why; \
  } while (0)

inline std::shared_ptr<Backend> gpu() { return create_backend({.name = "cuda"}).value(); }

// A device buffer holding a host vector's floats (or n NaNs).
struct Dev {
  std::unique_ptr<Buffer> buf;
  int64_t n;
  Dev(Backend& be, const std::vector<float>& host) : buf(be.alloc(host.size() * 4)), n(static_cast<int64_t>(host.size())) {
    cuda::copy_to_device(buf->data(), host.data(), host.size() * 4);
  }
  Dev(Backend& be, int64_t count) : Dev(be, std::vector<float>(static_cast<size_t>(count), std::numeric_limits<float>::quiet_NaN())) {}
  float* p() { return buf->floats(); }
  std::vector<float> host(Backend& be) const {
    std::vector<float> h(static_cast<size_t>(n));
    be.read_floats(buf->floats(), h.data(), n);
    return h;
  }
};

// Raw device memory, for the tests that call kernels directly.
struct DevMem {
  void* p;
  size_t n;
  explicit DevMem(size_t bytes) : p(device_alloc(bytes)), n(bytes) {}
  ~DevMem() { device_free(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

// A quantized matrix [n_out, n_in], its host view and (after to()) its device view.
struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView host, dev;
  Matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto f = sluice::cpu::testing::random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
    bytes.resize(row_bytes(type, n_in) * static_cast<size_t>(n_out));
    quantize_tensor(type, f.data(), bytes.data(), n_out, n_in);
    host = dev = WeightView{.type = type, .data = bytes.data(), .n_in = n_in, .n_out = n_out};
  }
};

// Copies the matrices' views to the device (kept alive by the result).
inline PreparedWeights to_device(Backend& be, std::vector<WeightView*> views) {
  const WeightGroup g(views.data(), views.size());
  return be.prepare_weights(std::span(&g, 1));
}

inline bool all_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
