// HostViews (cuda_host_views.h) on a device: a view used again before finish()
// is the same device copy while its piece is live in the ring, and is copied
// again after finish() (its host bytes may have changed) or once the ring has
// given its piece to later copies. Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_copy_queue.h"
#include "backend/cuda/cuda_host_views.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

constexpr size_t kView = size_t{256} << 10;

std::vector<uint8_t> on_device(const uint8_t* dev, cudaStream_t s) {
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(s));
  std::vector<uint8_t> out(kView);
  copy_to_host(out.data(), dev, kView);
  return out;
}

TEST(CudaHostViews, AViewUsedAgainBeforeFinishIsCopiedOnce) {
  SKIP_WITHOUT_GPU();
  std::vector<uint8_t> host(4 * kView);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + i / kView);
  const uint8_t* a = host.data();
  const uint8_t* b = host.data() + kView;
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&compute));
  {
    CopyQueue queue;
    HostViews views(3 * kView, queue);  // three views' room: a fourth retires the first
    ASSERT_TRUE(views.register_range(host.data(), host.size()));

    const HostViews::Copy first = views.copy_in(a, kView, compute);
    views.read(first.ticket, compute);
    const HostViews::Copy other = views.copy_in(b, kView, compute);
    views.read(other.ticket, compute);
    // a again, after a newer view was read: the same copy, nothing copied.
    const HostViews::Copy again = views.copy_in(a, kView, compute);
    views.read(again.ticket, compute);
    EXPECT_EQ(again.device, first.device);
    EXPECT_EQ(again.ticket, first.ticket);
    EXPECT_EQ(views.bytes_copied(), 2 * kView);
    EXPECT_EQ(on_device(again.device, compute), std::vector<uint8_t>(a, a + kView));
    // A part of a view is a view of its own.
    const HostViews::Copy half = views.copy_in(a, kView / 2, compute);
    views.read(half.ticket, compute);
    EXPECT_NE(half.ticket, first.ticket);
    EXPECT_EQ(views.bytes_copied(), 2 * kView + kView / 2);

    // After finish() the host bytes may have changed: copied again.
    views.finish();
    host[5] ^= 0xff;
    const HostViews::Copy after = views.copy_in(a, kView, compute);
    views.read(after.ticket, compute);
    EXPECT_NE(after.ticket, first.ticket);
    EXPECT_EQ(views.bytes_copied(), 3 * kView + kView / 2);
    EXPECT_EQ(on_device(after.device, compute), std::vector<uint8_t>(a, a + kView));

    // Views that fill the ring retire a's piece: a is copied again.
    for (int v = 1; v <= 3; ++v) {
      const HostViews::Copy c = views.copy_in(host.data() + static_cast<size_t>(v) * kView, kView, compute);
      views.read(c.ticket, compute);
      EXPECT_EQ(on_device(c.device, compute),
                std::vector<uint8_t>(host.data() + static_cast<size_t>(v) * kView,
                                     host.data() + static_cast<size_t>(v + 1) * kView));
    }
    const uint64_t before = views.bytes_copied();
    const HostViews::Copy back = views.copy_in(a, kView, compute);
    views.read(back.ticket, compute);
    EXPECT_NE(back.ticket, after.ticket);
    EXPECT_EQ(views.bytes_copied(), before + kView);
    EXPECT_EQ(on_device(back.device, compute), std::vector<uint8_t>(a, a + kView));
    views.finish();
    views.unregister_range(host.data());
  }
  ASSERT_EQ(cudaSuccess, cudaStreamDestroy(compute));
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
