#include "bench/units.h"

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TEST(BenchUnits, MillisecondsAndBinarySizes) {
  EXPECT_EQ(format_ms(0.0125), "12.50 ms");
  EXPECT_EQ(human_bytes(17), "17 B");
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_bytes(uint64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace sluice::bench
