// The device's expert slots (cuda_expert_slots.h) given up and taken back
// (the fluid split): with fewer slots the least recently used go sooner, and
// every expert acquired holds its own bytes before, while and after. Without
// a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_copy_queue.h"
#include "backend/cuda/cuda_expert_slots.h"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

constexpr int64_t kLayers = 2, kExperts = 4, kIn = 8, kOut = 4;
constexpr size_t kMatrixBytes = kIn * kOut * sizeof(float);

// Pinned host bytes for every expert's three F32 matrices, each byte naming
// its layer, expert, matrix and place.
struct HostExperts {
  uint8_t* p = nullptr;
  HostExperts() {
    EXPECT_EQ(cudaSuccess, cudaMallocHost(reinterpret_cast<void**>(&p), kLayers * kExperts * 3 * kMatrixBytes));
    for (size_t i = 0; i < kLayers * kExperts * 3 * kMatrixBytes; ++i) p[i] = static_cast<uint8_t>(i * 7 + i / 97);
  }
  ~HostExperts() { cudaFreeHost(p); }
  ExpertWeights of(int64_t l, int64_t e) const {
    const uint8_t* at = p + static_cast<size_t>((l * kExperts + e) * 3) * kMatrixBytes;
    auto view = [](const uint8_t* d) { return WeightView{.type = DType::kF32, .data = d, .n_in = kIn, .n_out = kOut}; };
    return {view(at), view(at + kMatrixBytes), view(at + 2 * kMatrixBytes)};
  }
};

// Acquires expert (l, e), checks its device bytes are the host's, releases it.
void check_acquire(DeviceExperts& slots, const HostExperts& host, int64_t l, int64_t e, cudaStream_t compute) {
  const ExpertWeights h = host.of(l, e);
  const ExpertWeights d = slots.acquire(l, e, h, compute);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(compute));
  for (auto [hv, dv] : {std::pair{&h.gate, &d.gate}, std::pair{&h.up, &d.up}, std::pair{&h.down, &d.down}}) {
    std::vector<uint8_t> back(kMatrixBytes);
    copy_to_host(back.data(), dv->data, kMatrixBytes);
    EXPECT_EQ(0, std::memcmp(back.data(), hv->data, kMatrixBytes)) << "layer " << l << " expert " << e;
  }
  slots.release(compute);
}

TEST(CudaExpertSlots, GivenUpAndTakenBackTheSlotsKeepEveryExpertsBytes) {
  SKIP_WITHOUT_GPU();
  HostExperts host;
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&compute));
  {
    CopyQueue q({.chunk_bytes = size_t{1} << 20, .max_in_flight = 2, .max_transfers = 16, .max_pieces = 4});
    // 12 slots in chunks of a layer's 4: a first chunk of 4, then two of 4.
    DeviceExperts slots(kLayers, kExperts, 3 * kMatrixBytes, 12, q, kExperts);
    auto round = [&] {  // every expert once, in order
      for (int64_t l = 0; l < kLayers; ++l)
        for (int64_t e = 0; e < kExperts; ++e) check_acquire(slots, host, l, e, compute);
    };
    round();
    uint64_t hits = slots.hits();
    round();  // 8 experts in 12 slots: every one found
    EXPECT_EQ(slots.hits() - hits, 8u);

    ASSERT_TRUE(slots.set_n_slots(4));  // two chunks given up
    EXPECT_EQ(slots.n_slots(), 4);
    EXPECT_EQ(slots.max_slots(), 12);
    const uint64_t misses = slots.misses();
    hits = slots.hits();
    // The first chunk kept layer 0's experts (the first copied in): found
    // once; then 8 experts in turn through 4 slots, every one copied in again.
    round();
    round();
    EXPECT_EQ(slots.hits() - hits, 4u);
    EXPECT_EQ(slots.misses() - misses, 12u);

    ASSERT_TRUE(slots.set_n_slots(8));  // one chunk taken back
    EXPECT_EQ(slots.n_slots(), 8);
    round();
    hits = slots.hits();
    round();  // 8 slots again: every one found
    EXPECT_EQ(slots.hits() - hits, 8u);
  }
  cudaStreamDestroy(compute);
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
