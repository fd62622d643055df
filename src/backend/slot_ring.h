// SlotRing: which weight group sits in which of a backend's device slots, and
// when a group's copy starts, for weights that stream from a slower tier into
// a ring of slots ahead of use (the cuda backend's --gpu-budget;
// cuda/cuda_weight_ring.h). The policy only: the bytes, the copies and their
// ordering against the compute are a SlotCopier's, so that the schedule is
// tested on any machine with a copier that is plain memory.
//
//   acquire(g):  g in a slot (copied now if it is not: copy, then the compute
//                waits for that copy), then the copies of the next n_slots - 1
//                groups in order (cyclic: decode walks the layers once per
//                token) started into slots whose groups are outside the window
//                g .. g + n_slots - 1, least recently acquired first
//   release(g):  the compute enqueued since acquire(g) is what reads g's slot
//                (mark_read); a copy into that slot comes after it
//
// A slot acquired and not yet released is never refilled. With no more groups
// than slots, every group stays in its slot after its first copy. Calls come
// from one thread at a time; nothing allocates after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

class SlotCopier {
 public:
  virtual ~SlotCopier() = default;
  // Starts the copy of group g into slot s, ordered after the compute that
  // mark_read(s) last recorded (if any).
  virtual void copy(int g, int s) = 0;
  // The compute enqueued from now on waits for slot s's last copy.
  virtual void wait_copied(int s) = 0;
  // The compute enqueued so far is the last that reads slot s.
  virtual void mark_read(int s) = 0;
};

class SlotRing {
 public:
  // n_groups >= 1 in reading order; n_slots >= 2. The copier outlives the ring.
  SlotRing(int n_groups, int n_slots, SlotCopier& copier);

  int n_groups() const { return static_cast<int>(group_slot_.size()); }
  int n_slots() const { return static_cast<int>(slot_group_.size()); }
  // The slot holding group g, ready for the compute enqueued next.
  int acquire(int g);
  // The compute enqueued since acquire(g) is the last to read it.
  void release(int g);
  // The slot group g is in (-1: none) and the group slot s holds (-1: none).
  int slot_of(int g) const { return group_slot_[static_cast<size_t>(g)]; }
  int group_in(int s) const { return slot_group_[static_cast<size_t>(s)]; }
  uint64_t n_copies() const { return n_copies_; }

 private:
  // Group g into a slot, keeping the window first .. first + n_slots - 1
  // where it can; -1 for a prefetch (!must) that finds every slot acquired.
  int ensure(int g, int first, bool must);
  bool in_window(int g, int first) const;

  SlotCopier& copier_;
  std::vector<int> slot_group_;      // -1: empty
  std::vector<int> group_slot_;      // -1: not in a slot
  std::vector<uint64_t> slot_tick_;  // when its group was last acquired
  std::vector<int> pins_;            // acquires not yet released
  uint64_t tick_ = 0, n_copies_ = 0;
};

}  // namespace sluice
