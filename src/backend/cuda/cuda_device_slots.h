// DeviceSlots: n slots of device memory that the backend's copy queue
// (cuda_copy_queue.h) fills from host memory and the compute stream reads,
// ordered by events in both directions (never the host): a fill waits for
// the kernels that last read the slot, and kernels wait for the slot's last
// fill. What the ring of streamed dispatches (cuda_weight_ring.h) and the
// expert slots (cuda_expert_slots.h) are made of; which group or expert goes
// where is their policy's, and so is the class of each fill (the queue issues
// critical fills before predicted ones).
//
//   fill:  begin_fill(s, class), copy(s, ...)*, end_fill(s)   one transfer
//   read:  wait_filled(s, compute), kernels, mark_read(s, compute)
//   back:  set_backed(n)   slots [0, n) in device memory, the rest's freed
//
// With chunk_slots > 0 the slots are allocated in chunks that set_backed can
// free and allocate again (the fluid split's units): the first chunk holds
// n_slots - k x chunk_slots slots (at least chunk_slots), each other one
// chunk_slots, so the backed counts are n_slots - j x chunk_slots.
//
// A fill not waited for yet can be raised to critical or cancelled (a
// prediction that turned out right or wrong). Calls come from one thread at
// a time; nothing allocates after construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/copy_schedule.h"
#include "backend/cuda/cuda_copy_queue.h"

namespace sluice::cuda {

class DeviceSlots {
 public:
  // The queue outlives the slots. chunk_slots: 0, one allocation.
  DeviceSlots(size_t slot_bytes, int n_slots, CopyQueue& queue, int chunk_slots = 0);
  ~DeviceSlots();
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  int n_slots() const { return static_cast<int>(read_.size()); }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(int s) const { return base_[static_cast<size_t>(s)]; }
  // Slots [0, n) backed by device memory from now on, the others' freed once
  // their fills are dropped and their readers done (the host waits for them).
  // n must be a chunk boundary. False: the device could not allocate a chunk
  // again (those backed stay). Between steps: no fill of a freed slot is
  // waited for later.
  bool set_backed(int n);
  int n_backed() const { return n_backed_; }

  // A fill of slot s of class c begins (a fill of s not waited for is cancelled).
  void begin_fill(int s, CopyClass c);
  // n bytes from host to slot s at offset, part of the fill.
  void copy(int s, size_t offset, const void* host, size_t n);
  // The fill is complete: submitted to the queue, after the slot's last readers.
  void end_fill(int s);
  // The work enqueued on compute from now on waits for slot s's last fill;
  // `copied` (if set) is recorded on the copy stream after it.
  void wait_filled(int s, cudaStream_t compute, cudaEvent_t copied = nullptr);
  // The work enqueued on compute so far is the last to read slot s.
  void mark_read(int s, cudaStream_t compute);
  // Whether slot s has a fill nobody waited for yet; raise it to critical, or drop it.
  bool fill_pending(int s) const { return pending_[static_cast<size_t>(s)] != 0; }
  // Whether that fill is on the copy stream whole (no chunk of it waits in the queue).
  bool fill_issued(int s) const;
  // Whether slot s's last fill is done (the host does not wait).
  bool fill_done(int s) const;
  void raise_fill(int s);
  void cancel_fill(int s);
  // Slot s's fill stays (its bytes will be read, later if at all) but gives
  // its queue record back: issued now, a slot event marks its end.
  void settle_fill(int s);
  // The host waits until slot s's last fill not waited for by compute yet
  // (pending or settled) is done: its host bytes may be reused after.
  void finish_fill(int s);

 private:
  static constexpr int kMaxPieces = 8;  // per fill
  struct Chunk {
    int first = 0, n = 0;
    uint8_t* dev = nullptr;  // null: freed
  };
  size_t slot_bytes_;
  std::vector<Chunk> chunks_;
  std::vector<uint8_t*> base_;  // [n_slots] each slot's memory, null while freed
  int n_backed_ = 0;
  CopyQueue& queue_;
  std::vector<cudaEvent_t> read_, filled_;        // [n_slots]
  std::vector<uint8_t> read_recorded_, filled_recorded_;  // filled_: a settled fill compute has not waited for
  std::vector<CopyQueue::Id> pending_;            // [n_slots] the fill not waited for, or 0
  CopyClass fill_class_ = CopyClass::kCritical;   // of the fill being built
  CopyPiece pieces_[kMaxPieces];
  int n_pieces_ = 0;
};

}  // namespace sluice::cuda
