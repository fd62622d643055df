#include "backend/byte_ring.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace sluice {
namespace {

TEST(ByteRing, PiecesFollowEachOtherAndWrapToTheStart) {
  ByteRing r(100, 8);
  EXPECT_EQ(r.allocate(40).offset, 0u);
  const ByteRing::Piece b = r.allocate(40);
  EXPECT_EQ(b.offset, 40u);
  EXPECT_EQ(b.ticket, 1);
  EXPECT_EQ(b.after, -1);  // nothing overwritten yet
  // 40 more would pass the end: from 0, over the first piece (ticket 0).
  const ByteRing::Piece c = r.allocate(40);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.after, 0);
  // Next: 40..80, over piece 1.
  const ByteRing::Piece d = r.allocate(30);
  EXPECT_EQ(d.offset, 40u);
  EXPECT_EQ(d.after, 1);
  EXPECT_EQ(r.live(), 2);
}

TEST(ByteRing, AWrapGivesUpThePreviousLapsTail) {
  ByteRing r(100, 8);
  r.allocate(30);               // 0: [0, 30)
  r.allocate(30);               // 1: [30, 60)
  r.allocate(30);               // 2: [60, 90)
  ByteRing::Piece p = r.allocate(50);  // wraps: [0, 50) over 0 and 1
  EXPECT_EQ(p.offset, 0u);
  EXPECT_EQ(p.after, 1);
  p = r.allocate(45);           // [50, 95) would overlap 2 ([60, 90))
  EXPECT_EQ(p.offset, 50u);
  EXPECT_EQ(p.after, 2);
  p = r.allocate(10);           // passes 100: wraps, over piece 3 at [0, 50)
  EXPECT_EQ(p.offset, 0u);
  EXPECT_EQ(p.after, 3);
}

TEST(ByteRing, AtMostMaxLivePiecesEvenWhenTheyFit) {
  ByteRing r(1000, 2);
  r.allocate(10);
  r.allocate(10);
  const ByteRing::Piece p = r.allocate(10);  // fits at 20, but only two may live: 0 goes
  EXPECT_EQ(p.offset, 20u);
  EXPECT_EQ(p.after, 0);
  EXPECT_EQ(r.live(), 2);
}

TEST(ByteRing, APieceIsLiveUntilRetired) {
  ByteRing r(100, 8);
  EXPECT_FALSE(r.is_live(0));  // not handed out yet
  r.allocate(40);              // 0: [0, 40)
  r.allocate(40);              // 1: [40, 80)
  EXPECT_TRUE(r.is_live(0));
  EXPECT_TRUE(r.is_live(1));
  EXPECT_FALSE(r.is_live(2));
  r.allocate(30);  // wraps over 0
  EXPECT_FALSE(r.is_live(0));
  EXPECT_TRUE(r.is_live(1));
  EXPECT_TRUE(r.is_live(2));
  r.allocate(100);  // everything
  EXPECT_FALSE(r.is_live(1));
  EXPECT_FALSE(r.is_live(2));
  EXPECT_TRUE(r.is_live(3));
}

TEST(ByteRing, AWholeCapacityPieceRetiresEverything) {
  ByteRing r(64, 4);
  r.allocate(16);
  r.allocate(16);
  const ByteRing::Piece p = r.allocate(64);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_EQ(p.after, 1);
  EXPECT_EQ(r.live(), 1);
}

// Against plain bookkeeping: live pieces never overlap one another, a new
// piece's range overlaps no piece newer than its `after`, and tickets retire
// in order.
TEST(ByteRing, RandomSizesNeverOverwriteALivePiece) {
  std::mt19937 rng(7);
  for (int max_live : {1, 3, 16}) {
    const size_t cap = 4096;
    ByteRing r(cap, max_live);
    struct Rec {
      size_t offset, bytes;
      int64_t ticket;
    };
    std::vector<Rec> live;
    int64_t retired_through = -1;
    for (int i = 0; i < 5000; ++i) {
      const size_t n = 1 + rng() % (rng() % 4 == 0 ? cap : cap / 5);
      const ByteRing::Piece p = r.allocate(n);
      ASSERT_LE(p.offset + n, cap);
      if (p.after >= 0) {
        ASSERT_GT(p.after, retired_through);  // each retires newer pieces than the last
      }
      ASSERT_LT(p.after, p.ticket);
      retired_through = std::max(retired_through, p.after);
      std::erase_if(live, [&](const Rec& x) { return x.ticket <= p.after; });
      for (const Rec& x : live) {
        ASSERT_TRUE(x.offset + x.bytes <= p.offset || p.offset + n <= x.offset)
            << "piece " << p.ticket << " overlaps live piece " << x.ticket;
      }
      live.push_back({p.offset, n, p.ticket});
      ASSERT_LE(static_cast<int>(live.size()), max_live);
      ASSERT_EQ(static_cast<int>(live.size()), r.live());
    }
  }
}

}  // namespace
}  // namespace sluice
