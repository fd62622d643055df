#include "base/huge_buffer.h"

#include <gtest/gtest.h>

#include <utility>

namespace sluice {
namespace {

TEST(HugeBuffer, ZeroFilledWritableAndMovable) {
  HugeBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(HugeBuffer(0).size(), 0u);

  const size_t n = (size_t{3} << 20) + 5;  // not a multiple of the 2 MiB page
  HugeBuffer a(n);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), n);
  for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(a.data()[i], 0) << i;
  EXPECT_EQ(a.data()[n - 1], 0);
  a.data()[0] = 7;
  a.data()[n - 1] = 9;

  HugeBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  ASSERT_EQ(b.size(), n);
  EXPECT_EQ(b.data()[0], 7);
  EXPECT_EQ(b.data()[n - 1], 9);

  HugeBuffer c(64);
  c = std::move(b);  // releases c's own mapping
  EXPECT_EQ(c.size(), n);
  EXPECT_EQ(c.data()[n - 1], 9);
}

}  // namespace
}  // namespace sluice
