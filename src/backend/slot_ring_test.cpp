// SlotRing's schedule with a copier that is plain memory: the group a slot
// holds is what acquire() hands out, a slot is refilled only after the
// compute that read it was marked, the next groups are copied ahead in
// reading order, and each group is copied once per pass over the layers.
#include "backend/slot_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
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

// Training's period over L layers of G groups each (layer l's groups are
// l * G .. l * G + G - 1): the forward, then each layer from the last, its
// groups forward (the recomputation) and in reverse (the transposed products).
std::vector<int> training_groups(int L, int G) {
  std::vector<int> order;
  for (int g = 0; g < L * G; ++g) order.push_back(g);
  for (int l = L - 1; l >= 0; --l) {
    for (int i = 0; i < G; ++i) order.push_back(l * G + i);
    for (int i = G - 1; i >= 0; --i) order.push_back(l * G + i);
  }
  return order;
}

// The offline optimum (Belady): a cache of k that, on a miss, drops what the
// sequence wants latest. The misses at positions [from, to).
int64_t optimal_misses(const std::vector<int>& seq, int k, size_t from, size_t to) {
  std::vector<int> cache;
  int64_t misses = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    if (std::find(cache.begin(), cache.end(), seq[i]) != cache.end()) continue;
    if (i >= from && i < to) ++misses;
    if (static_cast<int>(cache.size()) == k) {
      auto next = [&](int g) {
        for (size_t j = i + 1; j < seq.size(); ++j)
          if (seq[j] == g) return j;
        return std::numeric_limits<size_t>::max();
      };
      size_t victim = 0;
      for (size_t c = 1; c < cache.size(); ++c)
        if (next(cache[c]) > next(cache[victim])) victim = c;
      cache.erase(cache.begin() + static_cast<std::ptrdiff_t>(victim));
    }
    cache.push_back(seq[i]);
  }
  return misses;
}

TEST(SlotRing, TrainingsScheduleCostsNearTheOptimumAndFarFewerCopiesThanTheForwardOne) {
  const int L = 6, G = 4, k = 3;
  const std::vector<int> order = training_groups(L, G);
  auto run = [&](bool scheduled, std::vector<int>* copies_in_third) {
    FakeCopier c(k);
    SlotRing ring(L * G, k, c);
    if (scheduled) {
      EXPECT_TRUE(ring.set_schedule(order));
    }
    for (int period = 0; period < 3; ++period) {
      const size_t before = c.copies.size();
      for (int g : order) {
        const int s = ring.acquire(g);
        EXPECT_EQ(c.content[static_cast<size_t>(s)], g);
        ring.release(g);
      }
      if (period == 2) copies_in_third->assign(c.copies.begin() + static_cast<std::ptrdiff_t>(before), c.copies.end());
    }
  };
  std::vector<int> with, without;
  run(true, &with);
  run(false, &without);
  // By hand: a layer costs G copies forward, and G + (G - k) backward (the
  // recomputation leaves its last k groups for the reverse); at the bottom
  // the backward leaves the forward its first k groups.
  EXPECT_EQ(static_cast<int>(with.size()), (L - 1) * (3 * G - k) + G + 2 * (G - k));
  // The offline optimum over the same repeating sequence, its middle period:
  // the ring is no better (nothing is), and worse by a few copies at the top
  // turn, where copying k - 1 groups ahead takes slots the optimum keeps.
  std::vector<int> seq;
  for (int p = 0; p < 7; ++p) seq.insert(seq.end(), order.begin(), order.end());
  const int64_t optimum = optimal_misses(seq, k, 3 * order.size(), 4 * order.size());
  EXPECT_GE(static_cast<int64_t>(with.size()), optimum);
  EXPECT_LE(static_cast<int64_t>(with.size()), optimum + G);
  // Prefetching in forward order only, the backward's reverse reads miss.
  EXPECT_GT(without.size(), with.size() + static_cast<size_t>(L * (G - 1)));
  // copies_per_period counts what the ring did.
  const std::vector<int64_t> per_group = copies_per_period(L * G, k, order);
  EXPECT_EQ(std::accumulate(per_group.begin(), per_group.end(), int64_t{0}), static_cast<int64_t>(with.size()));
  for (int g = 0; g < L * G; ++g)
    EXPECT_EQ(per_group[static_cast<size_t>(g)], std::count(with.begin(), with.end(), g)) << g;
}

TEST(SlotRing, ASchedulePrefetchesItsNextGroupsAndAcquiresOutOfItStillWork) {
  const int k = 3;
  FakeCopier c(k);
  SlotRing ring(6, k, c);
  const std::vector<int> order = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};
  ASSERT_TRUE(ring.set_schedule(order));
  ring.acquire(0);  // 0, then 1 and 2 ahead
  ring.release(0);
  EXPECT_EQ(c.copies, (std::vector<int>{0, 1, 2}));
  ring.acquire(5);  // out of order: 5 now, then 4 and 3 (the schedule turns at 5)
  ring.release(5);
  EXPECT_EQ(c.copies, (std::vector<int>{0, 1, 2, 5, 4, 3}));
  ring.acquire(5);  // back to back: the same place, nothing copied
  ring.release(5);
  EXPECT_EQ(c.copies.size(), 6u);
  // A period that names a group out of range is refused.
  EXPECT_FALSE(ring.set_schedule(std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(ring.set_schedule(std::vector<int>{0, 1, 2, 3, 4, -1, 5}));
  ring.acquire(4);  // the schedule still holds: 2 comes ahead in place of 5, which it wants last
  ring.release(4);
  EXPECT_EQ(c.copies, (std::vector<int>{0, 1, 2, 5, 4, 3, 2}));
}

TEST(SlotRing, GroupsTheScheduleLeavesOutAreCopiedOnlyWhenAcquiredAndGiveWayFirst) {
  // Two layers of a routed model: a dense group, then four experts, of
  // which the router picks two; the schedule names the dense groups alone.
  const int k = 3;
  FakeCopier c(k);
  SlotRing ring(10, k, c);  // layer 0: 0 and experts 1-4; layer 1: 5 and experts 6-9
  ASSERT_TRUE(ring.set_schedule(std::vector<int>{0, 5}));
  for (int token = 0; token < 3; ++token) {
    for (int g : {0, 2, 4, 5, 6, 9}) {
      const int s = ring.acquire(g);
      ASSERT_EQ(c.content[static_cast<size_t>(s)], g);
      ring.release(g);
    }
  }
  // The first token: 0 with 5 ahead, then each picked expert when acquired.
  // After it, every token copies its four experts and nothing else: no
  // expert is copied ahead, and the experts give way before the dense groups.
  const std::vector<int> first = {0, 5, 2, 4, 6, 9};
  ASSERT_GE(c.copies.size(), first.size());
  EXPECT_EQ(std::vector<int>(c.copies.begin(), c.copies.begin() + 6), first);
  EXPECT_EQ(c.copies.size(), first.size() + 2 * 4);
  for (size_t i = first.size(); i < c.copies.size(); ++i) EXPECT_NE(c.copies[i] % 5, 0) << i;
  // With nothing named, every group is copied when acquired, none ahead.
  FakeCopier d(k);
  SlotRing lazy(10, k, d);
  ASSERT_TRUE(lazy.set_schedule(std::vector<int>{}));
  for (int g : {3, 7, 1}) {
    lazy.acquire(g);
    lazy.release(g);
  }
  EXPECT_EQ(d.copies, (std::vector<int>{3, 7, 1}));
}

}  // namespace
}  // namespace sluice
