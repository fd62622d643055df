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
  for (int g = 0; g < n_groups; ++g) order_.push_back(g);
  index_places();
}

void SlotRing::index_places() {
  place_begin_.assign(static_cast<size_t>(n_groups()) + 1, 0);
  for (int g : order_) ++place_begin_[static_cast<size_t>(g) + 1];
  for (size_t g = 1; g < place_begin_.size(); ++g) place_begin_[g] += place_begin_[g - 1];
  places_.resize(order_.size());
  std::vector<int64_t> fill(place_begin_.begin(), place_begin_.end() - 1);
  for (size_t p = 0; p < order_.size(); ++p)
    places_[static_cast<size_t>(fill[static_cast<size_t>(order_[p])]++)] = static_cast<int64_t>(p);
}

bool SlotRing::set_schedule(std::span<const int> order) {
  for (int g : order)
    if (g < 0 || g >= n_groups()) return false;
  order_.clear();
  for (int g : order)
    if (order_.empty() || order_.back() != g) order_.push_back(g);
  while (order_.size() > 1 && order_.back() == order_.front()) order_.pop_back();  // the wrap is back to back too
  index_places();
  pos_ = -1;
  return true;
}

int64_t SlotRing::next_use(int g) const {
  const auto period = static_cast<int64_t>(order_.size());
  const auto first = places_.begin() + place_begin_[static_cast<size_t>(g)];
  const auto last = places_.begin() + place_begin_[static_cast<size_t>(g) + 1];
  if (first == last) return kNever;  // left out: copied when acquired, never ahead
  const auto next = std::upper_bound(first, last, pos_);
  return next != last ? *next - pos_ : *first + period - pos_;
}

int SlotRing::ensure(int g, bool must) {
  const int have = group_slot_[static_cast<size_t>(g)];
  if (have >= 0) return have;
  // An empty slot, else the slot not acquired whose group is wanted latest
  // (the least recently acquired among equals); a prefetch takes it only if
  // that is later than g.
  int s = -1;
  int64_t s_next = 0;
  for (int i = 0; i < n_slots(); ++i) {
    const auto iu = static_cast<size_t>(i);
    const int held = slot_group_[iu];
    if (held < 0) {
      s = i;
      break;
    }
    if (pins_[iu] > 0) continue;
    const int64_t next = next_use(held);
    if (s < 0 || next > s_next || (next == s_next && slot_tick_[iu] < slot_tick_[static_cast<size_t>(s)])) {
      s = i;
      s_next = next;
    }
  }
  if (s >= 0 && slot_group_[static_cast<size_t>(s)] >= 0 && !must && s_next <= next_use(g)) s = -1;
  if (s < 0) {
    CHECK(!must && "SlotRing: more groups acquired at once than it has slots");
    return -1;  // a prefetch with nothing to give way to it: the acquire will copy it
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
  const auto period = static_cast<int64_t>(order_.size());
  if (const int64_t next = next_use(g); next != kNever && (pos_ < 0 || order_[static_cast<size_t>(pos_)] != g))
    pos_ = (pos_ + next) % period;
  const int s = ensure(g, true);
  const auto su = static_cast<size_t>(s);
  slot_tick_[su] = ++tick_;
  ++pins_[su];
  copier_.wait_copied(s);
  // The next distinct groups of the schedule, ahead of use, as long as each
  // has a slot to take.
  int ahead = 0;
  for (int64_t j = 1; j < period && ahead < n_slots() - 1; ++j) {
    const int h = order_[static_cast<size_t>((pos_ + j) % period)];
    if (h == g || next_use(h) != j) continue;  // g itself, or a group already passed in this walk
    ++ahead;
    if (ensure(h, false) < 0) break;
  }
  return s;
}

void SlotRing::release(int g) {
  const int s = group_slot_[static_cast<size_t>(g)];
  CHECK(s >= 0 && pins_[static_cast<size_t>(s)] > 0);
  --pins_[static_cast<size_t>(s)];
  copier_.mark_read(s);
}

namespace {

class CountingCopier final : public SlotCopier {
 public:
  explicit CountingCopier(int n_groups) : copies(static_cast<size_t>(n_groups), 0) {}
  void copy(int g, int) override { ++copies[static_cast<size_t>(g)]; }
  void wait_copied(int) override {}
  void mark_read(int) override {}
  std::vector<int64_t> copies;
};

}  // namespace

std::vector<int64_t> copies_per_period(int n_groups, int n_slots, std::span<const int> order) {
  CountingCopier c(n_groups);
  SlotRing ring(n_groups, n_slots, c);
  CHECK(ring.set_schedule(order));
  for (int period = 0; period < 3; ++period) {
    if (period == 2) std::fill(c.copies.begin(), c.copies.end(), 0);
    for (int g : order) {
      ring.acquire(g);
      ring.release(g);
    }
  }
  return c.copies;
}

}  // namespace sluice
