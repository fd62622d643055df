// DeviceExperts: a routed model's experts, handed over as host views (three
// tiers: the weight store's host RAM or its expert pool), kept in device slots
// once copied, so that an expert chosen again is read from HBM. Which expert
// sits in which slot is backend/expert_slots.h's ExpertSlots (least recently
// used goes; tested without a GPU); this class is its copier, over
// DeviceSlots (cuda_device_slots.h).
//
//   device  n_slots slots of one expert's gate, up and down (each 256-aligned)
//
// A copy into a slot waits (on the copy stream) for the kernels that last
// read the slot; the compute stream waits for the copy, also when the copy
// was a prefetch. Copies go through the backend's copy queue: a chosen
// expert's as critical, a predicted one's as predicted (behind the layers and
// chosen experts); once a layer's routing is known, settle_predictions()
// raises its right predictions to critical and cancels the wrong ones not
// copied yet. A prefetch from transient host bytes (a slot of the weight
// source's expert pool, which it reuses once the expert is neither predicted
// nor pinned) is let go of them in settle_transient(), or, once acquired, in
// finish(). The host waits only in those two. Calls come from one thread at
// a time; nothing allocates after construction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_device_slots.h"
#include "backend/expert_slots.h"

namespace sluice::cuda {

class DeviceExperts {
 public:
  // expert_bytes: one expert's three matrices; n_slots >= 2. chunk_slots:
  // the slots set_n_slots gives up or takes back at a time (0: none; see
  // DeviceSlots).
  DeviceExperts(int64_t n_layer, int64_t n_expert, uint64_t expert_bytes, int n_slots, CopyQueue& queue,
                int chunk_slots = 0);
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
  // Starts copying expert e of layer l into a slot, unless one holds it (the
  // router's prediction) or the slot it would take holds a prefetch not
  // acquired yet (declined()). Resident host bytes (transient false) must stay:
  // nothing waits for these copies. Transient ones stay until
  // settle_transient() lets the copy go, or until finish() after the expert
  // is acquired.
  void prefetch(int64_t layer, int64_t expert, const ExpertWeights& host, bool transient = false);
  // The transient prefetches of `layer` (every layer: -1) whose expert is not
  // in `keep`: dropped (the slot freed) if not on the copy stream whole, else
  // the host waits until the copy has read its bytes (the slot keeps it).
  void settle_transient(int64_t layer, std::span<const int32_t> keep);
  bool has_transient() const { return !transient_.empty(); }
  // Layer `layer` chose these experts: its predicted copies of them become
  // critical; the others' copies not issued yet are dropped and their slots freed.
  void settle_predictions(int64_t layer, std::span<const int32_t> chosen);
  // Returns once every copy issued so far has read its host bytes.
  void finish();
  // The fluid split: slots [0, n) kept, the device memory of the others freed
  // (their experts forgotten, their predicted copies dropped), or taken back
  // (n a chunk boundary, >= 2). Between steps, nothing held. False: the
  // device could not allocate them again (fewer are in use).
  bool set_n_slots(int n);

  int n_slots() const { return slots_.limit(); }  // in use now
  int max_slots() const { return slots_.n_slots(); }
  // Chosen experts found in a slot (acquire's hits) and copied in (its
  // misses), and the experts prefetch() copied.
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t prefetched() const { return prefetched_; }
  // Chosen experts found in a slot a prefetch filled (of hits(); counted
  // when settle_predictions() learns the layer's routing).
  uint64_t ready() const { return ready_; }
  // Prefetches not made: the slot they would take held another prefetch not used yet.
  uint64_t declined() const { return declined_; }
  // Chosen experts found in a slot whose copy was not done yet (of hits():
  // the compute waits for the copy stream).
  uint64_t late() const { return late_; }
  // Predicted copies dropped before they were issued (wrong predictions).
  uint64_t cancelled() const { return cancelled_; }
  size_t slot_bytes() const { return slots_dev_.slot_bytes(); }
  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  // Copies a missed expert's matrices into slot s, after the slot's readers.
  ExpertWeights copy_into(int s, const ExpertWeights& host, CopyClass c);
  // The views of an expert held in slot s.
  ExpertWeights in_slot(int s, const ExpertWeights& host) const;

  ExpertSlots slots_;
  DeviceSlots slots_dev_;
  cudaEvent_t copied_ = nullptr;  // after the last copy acquire() issued (finish() waits for it)
  int held_ = -1;                       // the slot of the last acquire
  bool pending_ = false;
  uint64_t bytes_copied_ = 0;
  uint64_t hits_ = 0, misses_ = 0, prefetched_ = 0, cancelled_ = 0, ready_ = 0, declined_ = 0, late_ = 0;
  std::vector<int> predicted_;  // slots prefetch() filled that no acquire() took yet
  std::vector<int> transient_;  // of those, the ones whose fill reads transient host bytes, not yet let go
};

}  // namespace sluice::cuda
