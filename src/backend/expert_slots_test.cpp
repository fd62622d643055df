#include "backend/expert_slots.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace sluice {
namespace {

TEST(ExpertSlots, AChosenExpertStaysUntilTheLeastRecentlyUsedGoes) {
  ExpertSlots s(2, 4, 3);
  const auto a = s.find(0, 1), b = s.find(0, 2), c = s.find(1, 1);
  EXPECT_FALSE(a.hit || b.hit || c.hit);
  EXPECT_EQ(std::set<int>({a.slot, b.slot, c.slot}).size(), 3u);
  EXPECT_TRUE(s.find(0, 1).hit);  // (0, 1) used again: (0, 2) is now the oldest
  const auto d = s.find(1, 3);
  EXPECT_FALSE(d.hit);
  EXPECT_EQ(d.slot, b.slot);
  EXPECT_FALSE(s.find(0, 2).hit);  // forgotten
  EXPECT_EQ(s.hits(), 1u);
  EXPECT_EQ(s.misses(), 5u);
}

// holds() and next_victim() look without touching: the victim named is the
// slot the next miss takes, and a look does not make a slot recently used.
TEST(ExpertSlots, ALookNamesTheNextVictimWithoutUsingAnything) {
  ExpertSlots s(2, 4, 3);
  const auto a = s.find(0, 1), b = s.find(0, 2), c = s.find(1, 1);
  EXPECT_TRUE(s.holds(0, 1) && s.holds(1, 1));
  EXPECT_FALSE(s.holds(1, 2));
  EXPECT_EQ(s.next_victim(), a.slot);
  EXPECT_EQ(s.next_victim(), a.slot);  // still: looking is no use
  EXPECT_EQ(s.hits(), 0u);
  EXPECT_TRUE(s.find(0, 1).hit);
  EXPECT_EQ(s.next_victim(), b.slot);
  EXPECT_EQ(s.find(1, 3).slot, b.slot);
  EXPECT_EQ(s.next_victim(), c.slot);
}

// A slot whose copy was cancelled holds nothing and goes first.
TEST(ExpertSlots, AForgottenSlotHoldsNothingAndGoesFirst) {
  ExpertSlots s(2, 4, 3);
  const auto a = s.find(0, 1), b = s.find(0, 2), c = s.find(1, 1);
  int64_t layer = -1, expert = -1;
  ASSERT_TRUE(s.held_by(c.slot, &layer, &expert));
  EXPECT_EQ(layer, 1);
  EXPECT_EQ(expert, 1);
  s.forget(c.slot);
  EXPECT_FALSE(s.held_by(c.slot, &layer, &expert));
  const auto d = s.find(1, 2);
  EXPECT_FALSE(d.hit);
  EXPECT_EQ(d.slot, c.slot);  // not a's, the least recently used of those holding one
  EXPECT_TRUE(s.find(0, 1).hit);
  EXPECT_TRUE(s.find(0, 2).hit);
  EXPECT_FALSE(s.find(1, 1).hit);
  (void)a, (void)b;
}

// The fluid split gives slots up from the end: their experts are forgotten
// and no miss takes them; given back, they are the first a miss takes.
TEST(ExpertSlots, ALimitForgetsTheSlotsPastItAndRaisedGivesThemFirst) {
  ExpertSlots s(2, 8, 6);
  for (int e = 0; e < 6; ++e) EXPECT_EQ(s.find(0, e).slot, e);  // slots in order while empty
  s.set_limit(3);
  EXPECT_EQ(s.limit(), 3);
  for (int e = 0; e < 3; ++e) EXPECT_TRUE(s.find(0, e).hit) << e;
  int64_t layer = -1, expert = -1;
  for (int slot = 3; slot < 6; ++slot) EXPECT_FALSE(s.held_by(slot, &layer, &expert)) << slot;
  EXPECT_FALSE(s.find(0, 4).hit);  // forgotten with its slot
  for (int e = 0; e < 40; ++e) EXPECT_LT(s.find(1, e % 8).slot, 3) << "no miss past the limit";
  s.set_limit(6);
  std::set<int> taken;
  for (int e = 5; e < 8; ++e) taken.insert(s.find(0, e).slot);
  EXPECT_EQ(taken, std::set<int>({3, 4, 5}));
}

TEST(ExpertSlots, TheSameExpertOfAnotherLayerIsAnotherKey) {
  ExpertSlots s(3, 2, 2);
  EXPECT_FALSE(s.find(0, 0).hit);
  EXPECT_FALSE(s.find(1, 0).hit);
  EXPECT_TRUE(s.find(0, 0).hit);
  EXPECT_TRUE(s.find(1, 0).hit);
}

// Against a plain model of the slots: a hit exactly when the key is held, a
// miss never takes the slot found just before, and no two keys share a slot.
TEST(ExpertSlots, RandomRoutingAgainstAPlainModel) {
  std::mt19937 rng(3);
  for (int n_slots : {2, 5, 40}) {
    ExpertSlots s(4, 16, n_slots);
    std::map<int64_t, int> held;  // key -> slot
    int last = -1;
    for (int i = 0; i < 20000; ++i) {
      const int64_t l = rng() % 4, e = rng() % 16, key = l * 16 + e;
      const ExpertSlots::Found f = s.find(l, e);
      ASSERT_EQ(f.hit, held.count(key) == 1);
      if (f.hit) {
        ASSERT_EQ(f.slot, held[key]);
      } else {
        ASSERT_NE(f.slot, last);
        std::erase_if(held, [&](const auto& kv) { return kv.second == f.slot; });
        held[key] = f.slot;
      }
      ASSERT_LE(static_cast<int>(held.size()), n_slots);
      last = f.slot;
    }
    EXPECT_EQ(s.hits() + s.misses(), 20000u);
  }
}

}  // namespace
}  // namespace sluice
