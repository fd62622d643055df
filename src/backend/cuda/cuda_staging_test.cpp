// The pinned staging ring inputs go to the device through (Staging in
// cuda_backend.h): more sends than buffers, none waited for in between, each
// landing with its own bytes: a buffer is written again only after the copy
// that last read it. (On the emulator with deferred streams every copy waits
// until the stream is synchronized, so a buffer reused too early shows.)
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
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

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
