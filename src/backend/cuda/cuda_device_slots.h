// DeviceSlots: n slots of device memory that a copy stream of their own
// fills from host memory and the compute stream reads, ordered by events in
// both directions (never the host): a fill waits for the kernels that last
// read the slot, and kernels wait for the slot's last fill. What the ring of
// streamed dispatches (cuda_weight_ring.h) and the expert slots
// (cuda_expert_slots.h) are made of; which group or expert goes where is
// their policy's.
//
//   fill:  begin_fill(s), copy(s, ...)*, end_fill(s)   on the copy stream
//   read:  wait_filled(s, compute), kernels, mark_read(s, compute)
//
// Calls come from one thread at a time; nothing allocates after construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::cuda {

class DeviceSlots {
 public:
  DeviceSlots(size_t slot_bytes, int n_slots);
  ~DeviceSlots();
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  int n_slots() const { return static_cast<int>(filled_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(int s) const { return dev_ + static_cast<size_t>(s) * slot_bytes_; }
  cudaStream_t copy_stream() const { return copy_; }

  // The copy stream waits for the kernels that last read slot s.
  void begin_fill(int s);
  // n bytes from host to slot s at offset, on the copy stream.
  void copy(int s, size_t offset, const void* host, size_t n);
  // The fill of slot s is what its next readers wait for.
  void end_fill(int s);
  // The work enqueued on compute from now on waits for slot s's last fill.
  void wait_filled(int s, cudaStream_t compute);
  // The work enqueued on compute so far is the last to read slot s.
  void mark_read(int s, cudaStream_t compute);

 private:
  size_t slot_bytes_;
  uint8_t* dev_ = nullptr;
  cudaStream_t copy_ = nullptr;
  std::vector<cudaEvent_t> filled_, read_;          // [n_slots]
  std::vector<uint8_t> filled_recorded_, read_recorded_;
};

}  // namespace sluice::cuda
