// ExpertSlotRange: a pool of expert slots the fluid split can shrink and grow
// (a weight store's pool of experts read from disk, or a device's slots of
// experts copied in): the slots in use, the fewest it may keep (one routed
// layer's experts, also the step between counts), the most, and one slot's
// bytes. max == 0: no such pool.
#pragma once

#include <cstdint>

namespace sluice {

struct ExpertSlotRange {
  int64_t now = 0, min = 0, max = 0;
  uint64_t slot_bytes = 0;
};

}  // namespace sluice
