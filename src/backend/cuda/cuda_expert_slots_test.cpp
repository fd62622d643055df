// The device's expert slots (cuda_expert_slots.h) given up and taken back
// (the fluid split): with fewer slots the least recently used go sooner, and
// every expert acquired holds its own bytes before, while and after; and
// copies from transient host bytes done with them once let go. Without a
// usable GPU every test skips.
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
  void allocate() {
    ASSERT_EQ(cudaSuccess, cudaMallocHost(reinterpret_cast<void**>(&p), kLayers * kExperts * 3 * kMatrixBytes));
    for (size_t i = 0; i < kLayers * kExperts * 3 * kMatrixBytes; ++i) p[i] = static_cast<uint8_t>(i * 7 + i / 97);
  }
  ~HostExperts() {
    if (p) cudaFreeHost(p);
  }
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

// Every test: the experts' pinned host bytes and a compute stream (the
// queue and the slots are each test's, gone before the stream).
class CudaExpertSlots : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_NO_FATAL_FAILURE(host.allocate());
    ASSERT_EQ(cudaSuccess, cudaStreamCreate(&compute));
  }
  void TearDown() override {
    if (compute) cudaStreamDestroy(compute);
  }
  HostExperts host;
  cudaStream_t compute = nullptr;
};

TEST_F(CudaExpertSlots, GivenUpAndTakenBackTheSlotsKeepEveryExpertsBytes) {
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
}

// With every slot holding a prefetch not used yet, another prefetch is
// declined rather than evict one; an acquire still takes a slot (the wrong
// prediction's, once the routing is known).
TEST_F(CudaExpertSlots, APrefetchDoesNotEvictAnotherNotUsedYet) {
  {
    CopyQueue q({.chunk_bytes = size_t{1} << 20, .max_in_flight = 2, .max_transfers = 16, .max_pieces = 4});
    DeviceExperts slots(kLayers, kExperts, 3 * kMatrixBytes, 2, q);
    for (int64_t e = 0; e < 3; ++e) slots.prefetch(1, e, host.of(1, e));
    EXPECT_EQ(slots.prefetched(), 2u);
    EXPECT_EQ(slots.declined(), 1u);
    const int32_t chosen[] = {0, 2};
    slots.settle_predictions(1, chosen);  // 1 was wrong: its slot goes to the next miss
    check_acquire(slots, host, 1, 0, compute);
    check_acquire(slots, host, 1, 2, compute);
    EXPECT_EQ(slots.hits(), 1u);
    EXPECT_EQ(slots.misses(), 1u);
    EXPECT_EQ(slots.ready(), 1u);
    slots.finish();
  }
}

// The bytes of an expert's three device matrices, after the compute stream.
std::vector<uint8_t> device_bytes(const ExpertWeights& d, cudaStream_t compute) {
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(compute));
  std::vector<uint8_t> out(3 * kMatrixBytes);
  size_t at = 0;
  for (const WeightView* v : {&d.gate, &d.up, &d.down}) {
    copy_to_host(out.data() + at, v->data, kMatrixBytes);
    at += kMatrixBytes;
  }
  return out;
}

// Prefetches from transient host bytes (the weight store's expert pool): the
// bytes may be overwritten once settle_transient() let go of a prefetch, or
// once finish() follows its acquire, and the device keeps what was there.
// Under the emulator's deferred copies (SLUICE_EMU_DEFER=copies) a copy that
// nothing waited for reads the host bytes only when forced to, so a let-go
// without the wait shows up as the overwritten bytes in a slot.
TEST_F(CudaExpertSlots, TransientPrefetchesAreDoneWithTheirHostBytesOnceLetGo) {
  const size_t expert_bytes = 3 * kMatrixBytes;
  const std::vector<uint8_t> was(host.p, host.p + kLayers * kExperts * expert_bytes);
  auto bytes_was = [&](int64_t l, int64_t e) {
    const auto at = was.begin() + static_cast<std::ptrdiff_t>((l * kExperts + e) * static_cast<int64_t>(expert_bytes));
    return std::vector<uint8_t>(at, at + static_cast<std::ptrdiff_t>(expert_bytes));
  };
  auto overwrite = [&](int64_t l, int64_t e) {  // the pool's slot takes another expert
    std::memset(host.p + static_cast<size_t>(l * kExperts + e) * expert_bytes, 0xa5, expert_bytes);
  };
  {
    CopyQueue q({.chunk_bytes = 64, .max_in_flight = 2, .max_transfers = 16, .max_pieces = 8});
    DeviceExperts slots(kLayers, kExperts, expert_bytes, 6, q);
    for (int64_t e = 0; e < kExperts; ++e) slots.prefetch(1, e, host.of(1, e), /*transient=*/true);
    EXPECT_EQ(slots.prefetched(), 4u);
    const int32_t kept[] = {1, 2};
    slots.settle_transient(1, kept);  // a refined prediction: 0 and 3 let go
    EXPECT_TRUE(slots.has_transient());
    overwrite(1, 0);
    overwrite(1, 3);
    slots.settle_predictions(1, kept);  // the layer routes to 1 and 2
    for (int64_t e : {1, 2}) {
      const uint64_t hits = slots.hits();
      const ExpertWeights d = slots.acquire(1, e, host.of(1, e), compute);
      EXPECT_EQ(slots.hits(), hits + 1) << e;
      EXPECT_EQ(device_bytes(d, compute), bytes_was(1, e)) << e;
      slots.release(compute);
    }
    EXPECT_EQ(slots.ready(), 2u);
    slots.finish();  // the layer's end: the chosen ones' host bytes are free too
    EXPECT_FALSE(slots.has_transient());
    overwrite(1, 1);
    overwrite(1, 2);
    // Found again with the bytes they were copied with; 0 and 3 found whole
    // from before the overwrite, or dropped and copied again from the new bytes.
    for (int64_t e = 0; e < kExperts; ++e) {
      const uint64_t hits = slots.hits();
      const ExpertWeights d = slots.acquire(1, e, host.of(1, e), compute);
      const bool hit = slots.hits() == hits + 1;
      if (e == 1 || e == 2) {
        EXPECT_TRUE(hit) << e;
      }
      const ExpertWeights h = host.of(1, e);
      const std::vector<uint8_t> now(h.gate.data, h.gate.data + expert_bytes);
      EXPECT_EQ(device_bytes(d, compute), hit ? bytes_was(1, e) : now) << e;
      slots.release(compute);
    }
    slots.finish();
    EXPECT_EQ(slots.prefetched() - slots.ready(), 2u);  // the wrong ones
  }
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
