// SlotRing's schedule with a copier that is plain memory: the group a slot
// holds is what acquire() hands out, a slot is refilled only after the
// compute that read it was marked, the next groups are copied ahead in
// reading order, and each group is copied once per pass over the layers.
#include "backend/slot_ring.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace sluice {
namespace {

// "Device" slots that hold a group id; every call is checked against the
// ordering contract as it comes.
class FakeCopier final : public SlotCopier {
 public:
  explicit FakeCopier(int n_slots)
      : content(static_cast<size_t>(n_slots), -1), waited(static_cast<size_t>(n_slots), 0),
        marked(static_cast<size_t>(n_slots), 0) {}
  void copy(int g, int s) override {
    const auto su = static_cast<size_t>(s);
    // The last read of the slot (an acquire's wait), if any, was marked
    // (released) before this copy; a slot only ever prefetched has no reader.
    if (waited[su] > 0) {
      EXPECT_GT(marked[su], waited[su]) << "slot " << s << " refilled while its reader runs";
    }
    content[su] = g;
    copies.push_back(g);
  }
  void wait_copied(int s) override { waited[static_cast<size_t>(s)] = ++clock; }
  void mark_read(int s) override { marked[static_cast<size_t>(s)] = ++clock; }

  std::vector<int> content;
  std::vector<uint64_t> waited, marked;
  std::vector<int> copies;
  uint64_t clock = 0;
};

TEST(SlotRing, DecodeWalksTheGroupsWithTheNextOnesCopiedAheadOncePerPass) {
  const int m = 10, k = 3, passes = 5;
  FakeCopier c(k);
  SlotRing ring(m, k, c);
  for (int p = 0; p < passes; ++p)
    for (int g = 0; g < m; ++g) {
      const int s = ring.acquire(g);
      ASSERT_EQ(c.content[static_cast<size_t>(s)], g);
      for (int i = 1; i < k; ++i) EXPECT_GE(ring.slot_of((g + i) % m), 0) << "group " << (g + i) % m << " not ahead";
      ring.release(g);
    }
  // Pass after pass the copies go in reading order, each group once.
  ASSERT_EQ(c.copies.size(), static_cast<size_t>(passes * m + k - 1));
  for (size_t i = 0; i < c.copies.size(); ++i) EXPECT_EQ(c.copies[i], static_cast<int>(i % m)) << i;
  EXPECT_EQ(ring.n_copies(), c.copies.size());
}

TEST(SlotRing, GroupsThatAllFitAreCopiedOnce) {
  for (int m : {1, 2, 3}) {
    FakeCopier c(3);
    SlotRing ring(m, 3, c);
    for (int p = 0; p < 4; ++p)
      for (int g = 0; g < m; ++g) {
        const int s = ring.acquire(g);
        EXPECT_EQ(c.content[static_cast<size_t>(s)], g);
        ring.release(g);
      }
    EXPECT_EQ(c.copies.size(), static_cast<size_t>(m)) << m;
  }
}

TEST(SlotRing, AnAcquiredSlotIsNotRefilledUntilReleased) {
  const int m = 10, k = 3;
  FakeCopier c(k);
  SlotRing ring(m, k, c);
  const int s0 = ring.acquire(0);
  // Far from 0: its window is 5, 6, 7, which would take 0's slot were it free.
  const int s5 = ring.acquire(5);
  EXPECT_NE(s0, s5);
  EXPECT_EQ(c.content[static_cast<size_t>(s0)], 0);
  EXPECT_EQ(ring.slot_of(0), s0);
  ring.release(5);
  ring.release(0);
  // Released, 0's slot is fair game for the window of 6.
  ring.acquire(6);
  ring.release(6);
  EXPECT_EQ(ring.slot_of(0), -1);
}

TEST(SlotRing, RoutedAccessInAnyOrderGetsItsGroupAndKeepsTheContract) {
  // Experts: data-dependent order, up to two groups held at once.
  const int m = 24, k = 3;
  FakeCopier c(k);
  SlotRing ring(m, k, c);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, m - 1);
  for (int step = 0; step < 2000; ++step) {
    const int a = pick(rng), b = pick(rng);
    const int sa = ring.acquire(a);
    const int sb = ring.acquire(b);
    ASSERT_EQ(c.content[static_cast<size_t>(sa)], a) << step;
    ASSERT_EQ(c.content[static_cast<size_t>(sb)], b) << step;
    if (a == b) {
      ASSERT_EQ(sa, sb);
    }
    ring.release(b);
    ring.release(a);
  }
  // Every copy is accounted for and every slot holds a distinct group.
  EXPECT_EQ(ring.n_copies(), c.copies.size());
  for (int s = 0; s < k; ++s)
    if (ring.group_in(s) >= 0) {
      EXPECT_EQ(ring.slot_of(ring.group_in(s)), s);
    }
}

}  // namespace
}  // namespace sluice
