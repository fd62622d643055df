// The copy queue (cuda_copy_queue.h) on a device: transfers of every class,
// many chunks and pieces, land whole and where they should, whether a stream
// or the host waits for them; a cancelled one stops; the queue works on after
// it. The order it issues chunks in is CopySchedule's (copy_schedule_test.cpp).
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_copy_queue.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

struct Pinned {
  uint8_t* p = nullptr;
  explicit Pinned(size_t n) { EXPECT_EQ(cudaSuccess, cudaMallocHost(reinterpret_cast<void**>(&p), n)); }
  ~Pinned() { cudaFreeHost(p); }
};

TEST(CudaCopyQueue, TransfersOfEveryClassLandWhole) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = size_t{24} << 20;
  Pinned host(kBytes);
  std::mt19937 rng(5);
  for (size_t i = 0; i < kBytes; ++i) host.p[i] = static_cast<uint8_t>(rng());
  void* dev = device_alloc(kBytes);
  std::vector<uint8_t> zero(kBytes, 0);
  copy_to_device(dev, zero.data(), kBytes);
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&compute));
  {
    CopyQueue q({.chunk_bytes = size_t{1} << 20, .max_in_flight = 2, .max_transfers = 16, .max_pieces = 4});
    // 12 transfers of 2 MiB each, in pieces of 3 sizes, over the classes in turn.
    std::vector<CopyQueue::Id> ids;
    for (int t = 0; t < 12; ++t) {
      const size_t base = static_cast<size_t>(t) * (size_t{2} << 20);
      const CopyPiece pieces[] = {{static_cast<uint8_t*>(dev) + base, host.p + base, 1000},
                                  {static_cast<uint8_t*>(dev) + base + 1000, host.p + base + 1000, (size_t{3} << 19)},
                                  {static_cast<uint8_t*>(dev) + base + 1000 + (size_t{3} << 19),
                                   host.p + base + 1000 + (size_t{3} << 19), (size_t{1} << 19) - 1000}};
      ids.push_back(q.submit(static_cast<CopyClass>(t % kNumCopyClasses), pieces, nullptr));
    }
    // Half waited for on a stream, half by the host; the last one first.
    for (int t = 11; t >= 0; --t) {
      if (t % 2) {
        q.wait(ids[static_cast<size_t>(t)], compute);
      } else {
        q.sync(ids[static_cast<size_t>(t)]);
      }
      q.retire(ids[static_cast<size_t>(t)]);
    }
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(compute));
    uint64_t total = 0;
    for (uint64_t b : q.bytes_issued()) total += b;
    EXPECT_EQ(total, uint64_t{12} * (uint64_t{2} << 20));
  }
  std::vector<uint8_t> back(kBytes);
  copy_to_host(back.data(), dev, kBytes);
  EXPECT_EQ(0, std::memcmp(back.data(), host.p, kBytes));
  cudaStreamDestroy(compute);
  device_free(dev);
}

// A cancelled transfer issues nothing more; what it had issued is done when
// cancel returns; the queue goes on.
TEST(CudaCopyQueue, CancelStopsATransferAndTheQueueGoesOn) {
  SKIP_WITHOUT_GPU();
  constexpr size_t kBytes = size_t{32} << 20;
  Pinned host(kBytes);
  std::memset(host.p, 7, kBytes);
  void* dev = device_alloc(kBytes);
  std::vector<uint8_t> zero(kBytes, 0);
  copy_to_device(dev, zero.data(), kBytes);
  {
    CopyQueue q({.chunk_bytes = size_t{1} << 20, .max_in_flight = 1, .max_transfers = 4, .max_pieces = 2});
    const CopyPiece big[] = {{dev, host.p, kBytes / 2}};
    const CopyQueue::Id id = q.submit(CopyClass::kReadAhead, big, nullptr);
    const size_t issued = q.cancel(id);
    EXPECT_LE(issued, kBytes / 2);
    std::vector<uint8_t> back(kBytes / 2);
    copy_to_host(back.data(), dev, kBytes / 2);
    size_t landed = 0;
    while (landed < back.size() && back[landed] == 7) ++landed;
    EXPECT_EQ(landed, issued) << "the bytes copied are exactly the chunks issued";
    for (size_t i = landed; i < back.size(); ++i) ASSERT_EQ(back[i], 0) << "a byte past the cancel was copied";
    const CopyPiece rest[] = {{static_cast<uint8_t*>(dev) + kBytes / 2, host.p, kBytes / 2}};
    const CopyQueue::Id next = q.submit(CopyClass::kCritical, rest, nullptr);
    q.sync(next);
    q.retire(next);
    q.finish();
  }
  std::vector<uint8_t> back(kBytes / 2);
  copy_to_host(back.data(), static_cast<uint8_t*>(dev) + kBytes / 2, kBytes / 2);
  for (uint8_t b : back) ASSERT_EQ(b, 7);
  device_free(dev);
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
