#include "backend/slot_ring.h"

#include <algorithm>

#include "base/check.h"

namespace sluice {

SlotRing::SlotRing(int n_groups, int n_slots, SlotCopier& copier)
    : copier_(copier),
      slot_group_(static_cast<size_t>(n_slots), -1),
      group_slot_(static_cast<size_t>(n_groups), -1),
      slot_tick_(static_cast<size_t>(n_slots), 0),
      pins_(static_cast<size_t>(n_slots), 0) {
  CHECK(n_groups >= 1 && n_slots >= 2);
}

bool SlotRing::in_window(int g, int first) const {
  const int m = n_groups();
  const int d = ((g - first) % m + m) % m;  // steps from first to g, cyclic
  return d < n_slots();
}

int SlotRing::ensure(int g, int first, bool must) {
  const int have = group_slot_[static_cast<size_t>(g)];
  if (have >= 0) return have;
  // An empty slot, else the least recently acquired one whose group is outside
  // the window; for the group needed now (must), else one inside it. Never a
  // slot acquired and not yet released.
  int s = -1;
  bool s_in = true;
  for (int i = 0; i < n_slots(); ++i) {
    const auto iu = static_cast<size_t>(i);
    const int held = slot_group_[iu];
    if (held < 0) {
      s = i;
      break;
    }
    if (pins_[iu] > 0) continue;
    const bool in = in_window(held, first);
    if (in && !must) continue;
    if (s < 0 || (s_in && !in) || (s_in == in && slot_tick_[iu] < slot_tick_[static_cast<size_t>(s)])) s = i, s_in = in;
  }
  if (s < 0) {
    CHECK(!must && "SlotRing: more groups acquired at once than it has slots");
    return -1;  // a prefetch with every slot in use: the acquire will copy it
  }
  const auto su = static_cast<size_t>(s);
  if (slot_group_[su] >= 0) group_slot_[static_cast<size_t>(slot_group_[su])] = -1;
  copier_.copy(g, s);
  ++n_copies_;
  slot_group_[su] = g;
  group_slot_[static_cast<size_t>(g)] = s;
  slot_tick_[su] = tick_;  // not yet used: oldest among equals
  return s;
}

int SlotRing::acquire(int g) {
  CHECK(g >= 0 && g < n_groups());
  const int s = ensure(g, g, true);
  const auto su = static_cast<size_t>(s);
  slot_tick_[su] = ++tick_;
  ++pins_[su];
  copier_.wait_copied(s);
  const int m = n_groups();
  for (int i = 1; i < std::min(n_slots(), m); ++i) ensure((g + i) % m, g, false);  // the next ones, ahead of use
  return s;
}

void SlotRing::release(int g) {
  const int s = group_slot_[static_cast<size_t>(g)];
  CHECK(s >= 0 && pins_[static_cast<size_t>(s)] > 0);
  --pins_[static_cast<size_t>(s)];
  copier_.mark_read(s);
}

}  // namespace sluice
