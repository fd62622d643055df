// SlotRing: which weight group sits in which of a backend's device slots, and
// when a group's copy starts, for weights that stream from a slower tier into
// a ring of slots ahead of use (the cuda backend's --gpu-budget;
// cuda/cuda_weight_ring.h). The policy only: the bytes, the copies and their
// ordering against the compute are a SlotCopier's, so that the schedule is
// tested on any machine with a copier that is plain memory.
//
// The ring walks a schedule: one period of the groups in the order they will
// be acquired, repeating. By default it is 0 .. n_groups-1 (decode walks the
// layers once per token); training sets its forward, then its backward, which
// visits each layer's groups forward (the recomputation) and then in reverse
// (the transposed products), with set_schedule().
//
//   acquire(g):  g in a slot (copied now if it is not: copy, then the compute
//                waits for that copy), then the copies of the next n_slots - 1
//                distinct groups of the schedule, each into an empty slot or
//                one whose group the schedule wants later than it (the latest
//                first; among equals, the least recently acquired)
//   release(g):  the compute enqueued since acquire(g) is what reads g's slot
//                (mark_read); a copy into that slot comes after it
//
// The schedule's position follows the acquires: acquire(g) moves it to g's
// next place in the period (it stays if g is where it is), so an acquire out
// of order costs that acquire a copy, never the contract. A group the
// schedule leaves out (a routed expert, whose turn only the router knows) is
// copied when acquired, never ahead, gives way first, and leaves the
// position where it is. A
// slot acquired and not yet released is never refilled. With no more groups
// than slots, every group stays in its slot after its first copy. Giving up
// what the schedule wants latest is the offline optimum's rule; copying
// n_slots - 1 groups ahead (so that the link has the next copies while the
// compute reads this group) costs a few copies more where a schedule turns.
// copies_per_period() counts them. Calls come from one thread at a time;
// nothing allocates after construction or set_schedule().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
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
  // One period of the groups in acquire order (a group repeated back to back
  // is one visit; a group left out is copied only when acquired: with none
  // named, every group is); the position goes to its start. False (and the
  // schedule unchanged): a group out of range.
  bool set_schedule(std::span<const int> order);
  // The slot holding group g, ready for the compute enqueued next.
  int acquire(int g);
  // The compute enqueued since acquire(g) is the last to read it.
  void release(int g);
  // The slot group g is in (-1: none) and the group slot s holds (-1: none).
  int slot_of(int g) const { return group_slot_[static_cast<size_t>(g)]; }
  int group_in(int s) const { return slot_group_[static_cast<size_t>(s)]; }
  uint64_t n_copies() const { return n_copies_; }

 private:
  // Group g into a slot: an empty one, else the unacquired one wanted latest;
  // for a prefetch (!must) only if that is later than g, else -1.
  int ensure(int g, bool must);
  // Positions from the current one to group g's next place in the period
  // (1 .. period; kNever for a group it leaves out): a binary search of g's
  // places, O(log period).
  int64_t next_use(int g) const;
  // order_'s places of each group: group g's, ascending, are
  // places_[place_begin_[g] .. place_begin_[g + 1]).
  void index_places();

  SlotCopier& copier_;
  std::vector<int> order_;           // the schedule, one period
  std::vector<int64_t> places_;      // [order_.size()]
  std::vector<int64_t> place_begin_; // [n_groups + 1]
  int64_t pos_ = -1;                 // where the last acquire was in it
  static constexpr int64_t kNever = int64_t{1} << 62;
  std::vector<int> slot_group_;      // -1: empty
  std::vector<int> group_slot_;      // -1: not in a slot
  std::vector<uint64_t> slot_tick_;  // when its group was last acquired
  std::vector<int> pins_;            // acquires not yet released
  uint64_t tick_ = 0, n_copies_ = 0;
};

// The copies of each group in one period of `order` once a ring of n_slots
// walking it is warm (its third period, each acquire released before the
// next): what a streamed schedule costs, without a device.
std::vector<int64_t> copies_per_period(int n_groups, int n_slots, std::span<const int> order);

}  // namespace sluice
