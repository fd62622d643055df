// WeightRing: the matrices that do not fit in the GPU's budget (--gpu-budget)
// live in pinned host memory and are copied into a ring of device slots ahead
// of use, on a copy stream of their own, so that the copies of the next
// dispatches overlap the kernels of this one.
//
//   host tier    one pinned arena, every streamed group's bytes back to back
//                (prepare_weights fills it, in the layouts the kernels read)
//   device ring  K slots, each the size of the largest streamed group
//
//   acquire(g):  g in a slot (copied now if it is not), the compute stream
//                made to wait for that copy (an event, not the host), then the
//                copies of the next K - 1 groups in order (cyclic: decode
//                walks the layers once per token) started into slots whose
//                groups are not among g .. g + K - 1
//   release(g):  the work enqueued on the compute stream since acquire(g) is
//                what reads the slot; a copy into it waits for that work
//
// Groups are numbered in the order the forward pass reads them. With no more
// groups than slots, every group stays in its slot after its first copy. A
// slot acquired and not yet released is never refilled.
// Calls come from one thread at a time (the backend's); nothing allocates
// after construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::cuda {

class WeightRing {
 public:
  // group_bytes: each streamed group's size, in reading order; n_slots >= 2.
  WeightRing(std::vector<size_t> group_bytes, int n_slots);
  ~WeightRing();
  WeightRing(const WeightRing&) = delete;
  WeightRing& operator=(const WeightRing&) = delete;

  int n_groups() const { return static_cast<int>(bytes_.size()); }
  int n_slots() const { return static_cast<int>(slot_group_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t host_bytes() const { return host_bytes_; }
  // Where group g's bytes go in the host tier (pinned; written before use).
  uint8_t* host(int g) { return host_ + offset_[static_cast<size_t>(g)]; }

  // The device copy of group g, ordered before the next work on `compute`.
  uint8_t* acquire(int g, cudaStream_t compute);
  // The work on `compute` since acquire(g) is the last to read g's slot.
  void release(int g, cudaStream_t compute);

  uint64_t bytes_copied() const { return bytes_copied_; }  // host to device, since construction

 private:
  // Group g into a slot (a copy on copy_ if it is not in one), keeping the
  // groups of the window first .. first + n_slots - 1 where it can; -1 for a
  // prefetch (!must) that finds every slot acquired.
  int ensure(int g, int first, bool must);
  bool in_window(int g, int first) const;

  std::vector<size_t> bytes_, offset_;
  size_t slot_bytes_ = 0, host_bytes_ = 0;
  uint8_t* host_ = nullptr;  // pinned
  uint8_t* dev_ = nullptr;   // [n_slots, slot_bytes_]
  cudaStream_t copy_ = nullptr;
  std::vector<int> slot_group_;     // -1: empty
  std::vector<int> group_slot_;     // -1: not in a slot
  std::vector<uint64_t> slot_tick_;  // when its group was last acquired
  std::vector<int> pins_;            // acquires not yet released
  std::vector<cudaEvent_t> copied_, used_;
  std::vector<uint8_t> used_recorded_;
  uint64_t tick_ = 0, bytes_copied_ = 0;
};

}  // namespace sluice::cuda
