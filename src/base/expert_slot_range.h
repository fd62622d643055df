// ExpertSlotRange: a pool of expert slots the fluid split can shrink and grow
// (a weight store's pool of experts read from disk, or a device's slots of
// experts copied in): the slots in use, the fewest it may keep (one routed
// layer's experts, also the step between counts), the most, and one slot's
// bytes. max == 0: no such pool.
//
// ExpertSlotCounts: a device's slots of experts copied in, counted since
// load: the chosen experts by where they were found (kept from before;
// copied ahead, of which `late` ones were still copying; missed: copied in
// at their use), and the copies ahead (made, dropped as wrong before they
// were copied, declined because the slot they would take held another not
// used yet). All zero: no such slots.
#pragma once

#include <cstdint>

namespace sluice {

struct ExpertSlotRange {
  int64_t now = 0, min = 0, max = 0;
  uint64_t slot_bytes = 0;
};

struct ExpertSlotCounts {
  uint64_t kept = 0, ahead = 0, late = 0, missed = 0;
  uint64_t copies_ahead = 0, dropped = 0, declined = 0;
};

}  // namespace sluice
