#include "backend/expert_slots.h"

#include "base/check.h"

namespace sluice {

ExpertSlots::ExpertSlots(int64_t n_layer, int64_t n_expert, int n_slots)
    : n_expert_(n_expert),
      slot_of_(static_cast<size_t>(n_layer * n_expert), -1),
      key_of_(static_cast<size_t>(n_slots), -1),
      stamp_(static_cast<size_t>(n_slots), 0),
      limit_(n_slots) {
  CHECK(n_layer >= 1 && n_expert >= 1 && n_slots >= 2);
}

ExpertSlots::Found ExpertSlots::find(int64_t layer, int64_t expert) {
  const int64_t key = layer * n_expert_ + expert;
  CHECK(layer >= 0 && expert >= 0 && expert < n_expert_ && key < static_cast<int64_t>(slot_of_.size()));
  ++clock_;
  if (const int32_t s = slot_of_[static_cast<size_t>(key)]; s >= 0) {
    stamp_[static_cast<size_t>(s)] = clock_;
    ++hits_;
    return {.slot = s, .hit = true};
  }
  const auto lru = static_cast<size_t>(next_victim());
  if (key_of_[lru] >= 0) slot_of_[static_cast<size_t>(key_of_[lru])] = -1;
  key_of_[lru] = key;
  slot_of_[static_cast<size_t>(key)] = static_cast<int32_t>(lru);
  stamp_[lru] = clock_;
  ++misses_;
  return {.slot = static_cast<int>(lru), .hit = false};
}

bool ExpertSlots::holds(int64_t layer, int64_t expert) const {
  const int64_t key = layer * n_expert_ + expert;
  CHECK(layer >= 0 && expert >= 0 && expert < n_expert_ && key < static_cast<int64_t>(slot_of_.size()));
  return slot_of_[static_cast<size_t>(key)] >= 0;
}

int ExpertSlots::next_victim() const {
  size_t lru = 0;
  for (size_t s = 1; s < static_cast<size_t>(limit_); ++s)
    if (stamp_[s] < stamp_[lru]) lru = s;
  return static_cast<int>(lru);
}

void ExpertSlots::forget(int s) {
  const auto su = static_cast<size_t>(s);
  CHECK(su < key_of_.size());
  if (key_of_[su] >= 0) slot_of_[static_cast<size_t>(key_of_[su])] = -1;
  key_of_[su] = -1;
  stamp_[su] = 0;
}

void ExpertSlots::set_limit(int n) {
  CHECK(n >= 2 && n <= n_slots());
  for (int s = n; s < limit_; ++s) forget(s);
  limit_ = n;
}

bool ExpertSlots::held_by(int s, int64_t* layer, int64_t* expert) const {
  const int64_t key = key_of_[static_cast<size_t>(s)];
  if (key < 0) return false;
  *layer = key / n_expert_;
  *expert = key % n_expert_;
  return true;
}

}  // namespace sluice
