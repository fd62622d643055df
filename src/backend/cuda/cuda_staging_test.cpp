// The pinned staging ring inputs go to the device through (Staging in
// cuda_backend.h): more sends than buffers, none waited for in between, each
// landing with its own bytes: a buffer is written again only after the copy
// that last read it. (On the emulator with deferred streams every copy waits
// until the stream is synchronized, so a buffer reused too early shows.)
// And the page-locked host memory the backend's reads go to (alloc_host).
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

TEST(CudaStaging, EverySendLandsWithItsOwnBytes) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = 4096;
  constexpr int kSends = 11;  // more than the ring holds
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&s));
  void* dev = device_alloc(kBytes * kSends);
  {
    Staging staging;
    for (int i = 0; i < kSends; ++i) {
      std::memset(staging.host(kBytes), i + 1, kBytes);
      staging.send(static_cast<uint8_t*>(dev) + static_cast<size_t>(i) * kBytes, kBytes, s);
    }
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(s));
  }
  std::vector<uint8_t> back(kBytes * kSends);
  copy_to_host(back.data(), dev, back.size());
  for (int i = 0; i < kSends; ++i)
    for (size_t j = 0; j < kBytes; j += 511)
      ASSERT_EQ(back[static_cast<size_t>(i) * kBytes + j], i + 1) << "send " << i << " byte " << j;
  device_free(dev);
  cudaStreamDestroy(s);
}

// alloc_host is page-locked on this backend (what makes the logits' copy run at
// the bus's rate), zero-filled, and a copy from the device into it lands once
// the backend has read it back.
TEST(CudaStaging, HostMemoryForReadsIsPageLocked) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<Backend> be = gpu();
  constexpr int64_t kN = 3000;
  std::unique_ptr<Buffer> host = be->alloc_host(kN * sizeof(float));
  ASSERT_EQ(host->size(), kN * sizeof(float));
  cudaPointerAttributes at{};
  ASSERT_EQ(cudaSuccess, cudaPointerGetAttributes(&at, host->data()));
  EXPECT_EQ(at.type, cudaMemoryTypeHost);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(host->floats()[i], 0.0f) << i;
  std::unique_ptr<Buffer> dev = be->alloc(kN * sizeof(float));
  std::vector<float> want(kN);
  for (int64_t i = 0; i < kN; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f - 7.0f;
  be->write_floats(want.data(), dev->floats(), kN);
  be->read_floats(dev->floats(), host->floats(), kN);
  EXPECT_EQ(std::vector<float>(host->floats(), host->floats() + kN), want);
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
