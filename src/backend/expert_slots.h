// ExpertSlots: which of a backend's device slots holds which expert of which
// layer, for experts a weight source hands over in host memory (three tiers:
// a routed model's experts in host RAM or read from the file; the device
// keeps the ones it copied). Least recently used goes first. The policy only,
// tested on any machine; the bytes, the copies and their ordering against the
// kernels are the backend's (cuda/cuda_expert_slots.h).
//
//   find(l, e)  hit: the slot that holds expert e of layer l (now the most
//               recently used); miss: the least recently used slot, which
//               forgets its expert and is to receive this one
//
// The slot found last is never the one a miss takes next (n_slots >= 2), so
// an expert whose kernels are not yet enqueued is not overwritten. Calls come
// from one thread at a time; nothing allocates after construction.
#pragma once

#include <cstdint>
#include <vector>

namespace sluice {

class ExpertSlots {
 public:
  // n_slots >= 2; keys are (layer, expert) for layer < n_layer, expert < n_expert.
  ExpertSlots(int64_t n_layer, int64_t n_expert, int n_slots);

  struct Found {
    int slot = 0;
    bool hit = false;
  };
  Found find(int64_t layer, int64_t expert);
  // Without changing anything: whether a slot holds expert e of layer l, and
  // the slot a miss would take now.
  bool holds(int64_t layer, int64_t expert) const;
  int next_victim() const;
  // Slot s holds nothing from now on and is the next a miss takes (its copy
  // was cancelled: a prediction that turned out wrong).
  void forget(int s);
  // The (layer, expert) slot s holds; false when it holds none.
  bool held_by(int s, int64_t* layer, int64_t* expert) const;
  // Only slots [0, n) are used from now on (2 <= n <= n_slots()): the rest
  // forget their experts (the fluid split gave their memory up); raised
  // again, the slots given back are the first a miss takes.
  void set_limit(int n);

  int n_slots() const { return static_cast<int>(stamp_.size()); }
  int limit() const { return limit_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  int64_t n_expert_;
  std::vector<int32_t> slot_of_;    // [n_layer * n_expert] its slot, or -1
  std::vector<int64_t> key_of_;     // [n_slots] the key a slot holds, or -1
  std::vector<uint64_t> stamp_;     // [n_slots] last use (0: never)
  int limit_ = 0;                   // slots in use: [0, limit_)
  uint64_t clock_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace sluice
