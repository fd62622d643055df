#include "backend/copy_schedule.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// Fake memory: piece i of a transfer is n bytes at a distinct source.
struct Buffers {
  std::vector<uint8_t> src, dst;
  explicit Buffers(size_t n) : src(n), dst(n, 0) {
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  CopyPiece piece(size_t at, size_t n) { return {dst.data() + at, src.data() + at, n}; }
};

// Issues every chunk left, copying it, and returns the ids in issue order.
std::vector<CopySchedule::Id> drain(CopySchedule& s) {
  std::vector<CopySchedule::Id> order;
  CopySchedule::Chunk c;
  while (s.next(&c)) {
    std::memcpy(c.piece.dst, c.piece.src, c.piece.n);
    order.push_back(c.id);
  }
  return order;
}

TEST(CopySchedule, ChunksCoverEveryPieceOnceInOrder) {
  Buffers b(10000);
  CopySchedule s(1000, 4, 8);
  const CopyPiece pieces[] = {b.piece(0, 2500), b.piece(3000, 10), b.piece(5000, 4000), b.piece(9500, 0)};
  const auto id = s.submit(CopyClass::kCritical, pieces);
  ASSERT_NE(id, 0u);
  std::vector<CopySchedule::Chunk> chunks;
  CopySchedule::Chunk c;
  while (s.next(&c)) {
    std::memcpy(c.piece.dst, c.piece.src, c.piece.n);
    EXPECT_LE(c.piece.n, 1000u);
    chunks.push_back(c);
  }
  ASSERT_EQ(chunks.size(), 3u + 1u + 4u);
  EXPECT_TRUE(chunks.front().first);
  EXPECT_TRUE(chunks.back().last);
  for (size_t i = 1; i + 1 < chunks.size(); ++i) EXPECT_FALSE(chunks[i].first || chunks[i].last) << i;
  EXPECT_TRUE(s.fully_issued(id));
  EXPECT_EQ(s.issued_bytes(id), 6510u);
  EXPECT_EQ(0, std::memcmp(b.dst.data(), b.src.data(), 2500));
  EXPECT_EQ(0, std::memcmp(b.dst.data() + 3000, b.src.data() + 3000, 10));
  EXPECT_EQ(0, std::memcmp(b.dst.data() + 5000, b.src.data() + 5000, 4000));
  EXPECT_EQ(b.dst[2600], 0) << "a byte outside every piece was written";
  s.retire(id);
  EXPECT_EQ(s.n_alive(), 0);
}

// A critical transfer submitted behind a long predicted one goes next, after
// the predicted chunk already issued; swap and read-ahead wait for both.
TEST(CopySchedule, TheMostUrgentClassGoesFirstThenTheOldest) {
  Buffers b(100000);
  CopySchedule s(1000, 8, 4);
  const CopyPiece p1[] = {b.piece(0, 5000)};
  const auto predicted = s.submit(CopyClass::kPredicted, p1);
  CopySchedule::Chunk c;
  ASSERT_TRUE(s.next(&c));
  EXPECT_EQ(c.id, predicted);
  const CopyPiece p2[] = {b.piece(10000, 2000)}, p3[] = {b.piece(20000, 1000)}, p4[] = {b.piece(30000, 1000)},
                  p5[] = {b.piece(40000, 1000)};
  const auto read_ahead = s.submit(CopyClass::kReadAhead, p3);
  const auto swap = s.submit(CopyClass::kSwap, p4);
  const auto critical = s.submit(CopyClass::kCritical, p2);
  const auto critical2 = s.submit(CopyClass::kCritical, p5);
  const std::vector<CopySchedule::Id> want = {critical, critical, critical2, predicted, predicted, predicted,
                                              predicted, swap, read_ahead};
  EXPECT_EQ(drain(s), want);
}

// A waiter promotes its transfer ahead of every class; a right prediction is
// raised to critical, a wrong one cancelled with nothing of it copied.
TEST(CopySchedule, PromoteReprioritizeAndCancel) {
  Buffers b(100000);
  CopySchedule s(1000, 8, 4);
  const CopyPiece p1[] = {b.piece(0, 2000)}, p2[] = {b.piece(10000, 2000)}, p3[] = {b.piece(20000, 2000)},
                  p4[] = {b.piece(30000, 1000)};
  const auto critical = s.submit(CopyClass::kCritical, p1);
  const auto right = s.submit(CopyClass::kPredicted, p2);
  const auto wrong = s.submit(CopyClass::kPredicted, p3);
  const auto read_ahead = s.submit(CopyClass::kReadAhead, p4);
  s.promote(read_ahead);
  s.reprioritize(right, CopyClass::kCritical);
  EXPECT_EQ(s.class_of(right), CopyClass::kCritical);
  EXPECT_EQ(s.cancel(wrong), 0u);
  EXPECT_FALSE(s.alive(wrong));
  const std::vector<CopySchedule::Id> want = {read_ahead, critical, critical, right, right};
  EXPECT_EQ(drain(s), want);
  EXPECT_EQ(b.dst[20000], 0) << "the cancelled transfer was copied";
  EXPECT_EQ(s.bytes_issued()[static_cast<size_t>(CopyClass::kReadAhead)], 1000u);
  EXPECT_EQ(s.bytes_issued()[static_cast<size_t>(CopyClass::kCritical)], 4000u);
  EXPECT_EQ(s.bytes_issued()[static_cast<size_t>(CopyClass::kPredicted)], 0u);
}

// A transfer's own chunks on demand (a waiter issuing them), and a
// cancellation part way says how much was copied.
TEST(CopySchedule, NextOfAndCancelPartWay) {
  Buffers b(100000);
  CopySchedule s(1000, 4, 4);
  const CopyPiece p1[] = {b.piece(0, 3000)}, p2[] = {b.piece(10000, 3000)};
  const auto a = s.submit(CopyClass::kCritical, p1);
  const auto c = s.submit(CopyClass::kSwap, p2);
  CopySchedule::Chunk ch;
  ASSERT_TRUE(s.next_of(c, &ch));
  EXPECT_EQ(ch.id, c);
  EXPECT_TRUE(ch.first);
  EXPECT_EQ(s.cancel(c), 1000u);
  EXPECT_EQ(drain(s), (std::vector<CopySchedule::Id>{a, a, a}));
}

TEST(CopySchedule, FullAndOversizedSubmissionsAreRefused) {
  Buffers b(1000);
  CopySchedule s(100, 2, 2);
  const CopyPiece one[] = {b.piece(0, 10)};
  const CopyPiece three[] = {b.piece(0, 10), b.piece(10, 10), b.piece(20, 10)};
  EXPECT_EQ(s.submit(CopyClass::kCritical, three), 0u);
  const auto x = s.submit(CopyClass::kCritical, one);
  const auto y = s.submit(CopyClass::kCritical, one);
  EXPECT_NE(x, 0u);
  EXPECT_NE(y, 0u);
  EXPECT_EQ(s.submit(CopyClass::kCritical, one), 0u);
  s.retire(x);
  EXPECT_NE(s.submit(CopyClass::kCritical, one), 0u);
  // A transfer of no bytes is issued from the start.
  s.retire(y);
  const CopyPiece none[] = {b.piece(0, 0)};
  const auto z = s.submit(CopyClass::kCritical, none);
  EXPECT_TRUE(s.fully_issued(z));
}

TEST(CopySchedule, ClassNames) {
  EXPECT_EQ(std::string(copy_class_name(CopyClass::kCritical)), "critical");
  EXPECT_EQ(std::string(copy_class_name(CopyClass::kReadAhead)), "read-ahead");
}

}  // namespace
}  // namespace sluice
