// WeightRing: the matrices that do not fit in the GPU's budget (--gpu-budget)
// live in pinned host memory and are copied into a ring of device slots ahead
// of use, through the backend's copy queue (as critical copies), so that the
// copies of the next dispatches overlap the kernels of this one.
//
//   host tier    one pinned arena, every streamed group's bytes back to back
//                (prepare_weights fills it, in the layouts the kernels read)
//   device ring  K slots, each the size of the largest streamed group
//
// Which group goes in which slot, and when, is backend/slot_ring.h's SlotRing
// (tested without a GPU); this class is its copier, over DeviceSlots
// (cuda_device_slots.h): a copy into a slot waits (on the copy stream) for the
// kernels that last read the slot, and the compute stream waits for the copy
// before the kernels that read it (events, never the host).
//
// Groups are numbered in the order the forward pass reads them. Calls come
// from one thread at a time (the backend's); nothing allocates after
// construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_device_slots.h"
#include "backend/slot_ring.h"

namespace sluice::cuda {

class WeightRing final : private SlotCopier {
 public:
  // group_bytes: each streamed group's size, in reading order; n_slots >= 2.
  WeightRing(std::vector<size_t> group_bytes, int n_slots, CopyQueue& queue);
  ~WeightRing() override;
  WeightRing(const WeightRing&) = delete;
  WeightRing& operator=(const WeightRing&) = delete;

  int n_groups() const { return ring_.n_groups(); }
  int n_slots() const { return ring_.n_slots(); }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t host_bytes() const { return host_bytes_; }
  // Where group g's bytes go in the host tier (pinned; written before use).
  uint8_t* host(int g) { return host_ + offset_[static_cast<size_t>(g)]; }

  // The order of the acquires, one period (SlotRing::set_schedule); false: a
  // group out of range.
  bool set_schedule(std::span<const int> order);
  // Host-to-device bytes one period of the schedule copies once warm.
  uint64_t scheduled_bytes() const { return scheduled_bytes_; }

  // The device copy of group g, ordered before the next work on `compute`.
  uint8_t* acquire(int g, cudaStream_t compute);
  // The work on `compute` since acquire(g) is the last to read g's slot.
  void release(int g, cudaStream_t compute);

  uint64_t bytes_copied() const { return bytes_copied_; }  // host to device, since construction

 private:
  void copy(int g, int s) override;
  void wait_copied(int s) override;
  void mark_read(int s) override;

  std::vector<size_t> bytes_, offset_;
  size_t slot_bytes_ = 0, host_bytes_ = 0;
  uint8_t* host_ = nullptr;  // pinned
  std::unique_ptr<DeviceSlots> slots_;  // [n_slots, slot_bytes_]
  cudaStream_t compute_ = nullptr;  // the stream of the acquire / release in progress
  uint64_t bytes_copied_ = 0;
  uint64_t scheduled_bytes_ = 0;
  SlotRing ring_;
};

}  // namespace sluice::cuda
