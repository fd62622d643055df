#include "base/meminfo.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

constexpr const char* kText =
    "MemTotal:       24611236 kB\n"
    "MemFree:         1234 kB\n"
    "MemAvailable:   22987652 kB\n"
    "Cached:           912340 kB\n"
    "HugePages_Total:       0\n"
    "Broken:         12 MB\n"
    "Empty:          kB\n";

TEST(Meminfo, ParsesKilobyteFieldsAsBytes) {
  EXPECT_EQ(parse_meminfo_bytes(kText, "MemTotal"), uint64_t{24611236} * 1024);
  EXPECT_EQ(parse_meminfo_bytes(kText, "MemAvailable"), uint64_t{22987652} * 1024);
  EXPECT_EQ(parse_meminfo_bytes(kText, "Cached"), uint64_t{912340} * 1024);
  EXPECT_EQ(parse_meminfo_bytes(kText, "HugePages_Total"), uint64_t{0});
}

TEST(Meminfo, AbsentOrMalformedKeysAreNullopt) {
  EXPECT_EQ(parse_meminfo_bytes(kText, "Mem"), std::nullopt);  // a prefix of a key is not the key
  EXPECT_EQ(parse_meminfo_bytes(kText, "SwapTotal"), std::nullopt);
  EXPECT_EQ(parse_meminfo_bytes(kText, "Broken"), std::nullopt);
  EXPECT_EQ(parse_meminfo_bytes(kText, "Empty"), std::nullopt);
  EXPECT_EQ(parse_meminfo_bytes("", "MemTotal"), std::nullopt);
  EXPECT_EQ(parse_meminfo_bytes("MemTotal: 99999999999999999999999 kB\n", "MemTotal"), std::nullopt);
}

TEST(Meminfo, ThisMachineReportsMemory) {
  const auto total = meminfo_bytes("MemTotal");
  if (!total) GTEST_SKIP() << "/proc/meminfo is not readable here";
  EXPECT_GT(*total, uint64_t{0});
  const auto avail = meminfo_bytes("MemAvailable");
  ASSERT_TRUE(avail.has_value());
  EXPECT_LE(*avail, *total);
}

}  // namespace
}  // namespace sluice
