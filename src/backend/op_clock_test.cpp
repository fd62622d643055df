#include "backend/op_clock.h"

#include <gtest/gtest.h>

#include "base/timer.h"

namespace sluice {
namespace {

void spin(double seconds) {
  const double t0 = now_seconds();
  while (now_seconds() - t0 < seconds) {
  }
}

// Marks read back in order from the first; the last is kept as the next
// read's first, so the time between reads is not lost.
TEST(HostOpClock, ReadsMarksInOrderAndKeepsTheLast) {
  HostOpClock clock(3);
  EXPECT_EQ(clock.capacity(), 3);
  std::vector<double> at;
  clock.read(at);
  EXPECT_TRUE(at.empty());
  for (int i = 0; i < 3; ++i) {
    clock.mark();
    spin(0.001);
  }
  clock.read(at);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0], 0.0);
  EXPECT_GE(at[1], 0.001);
  EXPECT_GE(at[2] - at[1], 0.001);
  clock.mark();
  clock.mark();
  clock.read(at);
  ASSERT_EQ(at.size(), 3u) << "the first read's last mark is this one's first";
  EXPECT_EQ(at[0], 0.0);
  EXPECT_GE(at[1], 0.001) << "spun after the kept mark";
  EXPECT_LE(at[1], at[2]);
}

}  // namespace
}  // namespace sluice
