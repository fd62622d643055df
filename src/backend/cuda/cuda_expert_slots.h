// DeviceExperts: a routed model's experts, handed over as host views (three
// tiers: the weight store's host RAM or its expert pool), kept in device slots
// once copied, so that an expert chosen again is read from HBM. Which expert
// sits in which slot is backend/expert_slots.h's ExpertSlots (least recently
// used goes; tested without a GPU); this class is its copier.
//
//   device  n_slots slots of one expert's gate, up and down (each 256-aligned)
//
// A copy into a slot waits (on a copy stream of its own) for the event
// recorded behind the kernels that last read the slot; the compute stream
// waits for the copy's event. The host waits only in finish(). Calls come
// from one thread at a time; nothing allocates after construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/expert_slots.h"

namespace sluice::cuda {

class DeviceExperts {
 public:
  // expert_bytes: one expert's three matrices; n_slots >= 2.
  DeviceExperts(int64_t n_layer, int64_t n_expert, uint64_t expert_bytes, int n_slots);
  ~DeviceExperts();
  DeviceExperts(const DeviceExperts&) = delete;
  DeviceExperts& operator=(const DeviceExperts&) = delete;

  // Slot bytes for experts of expert_bytes (each matrix 256-byte aligned).
  static size_t slot_bytes_for(uint64_t expert_bytes);

  // Expert e of layer l, whose host views are `host`: views into its slot,
  // copied in on a miss, ordered before the next work on `compute`.
  ExpertWeights acquire(int64_t layer, int64_t expert, const ExpertWeights& host, cudaStream_t compute);
  // The work on `compute` since the last acquire is the last to read its slot.
  void release(cudaStream_t compute);
  // Returns once every copy issued so far has read its host bytes.
  void finish();

  const ExpertSlots& slots() const { return slots_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  ExpertSlots slots_;
  size_t slot_bytes_;
  uint8_t* dev_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  std::vector<cudaEvent_t> read_;       // [n_slots]
  std::vector<uint8_t> read_recorded_;  // [n_slots]
  int held_ = -1;                       // the slot of the last acquire
  bool pending_ = false;
  uint64_t bytes_copied_ = 0;
};

}  // namespace sluice::cuda
