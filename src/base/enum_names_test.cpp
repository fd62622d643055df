#include "base/enum_names.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

enum class Colour { kRed = 4, kGreen = 1, kBlue = 9 };

constexpr EnumName<Colour> kColourNames[] = {{Colour::kRed, "red"}, {Colour::kGreen, "green"}};

TEST(EnumNames, NamesByValueNotPosition) {
  static_assert(enum_name(Colour::kGreen, kColourNames)[0] == 'g');
  EXPECT_STREQ(enum_name(Colour::kRed, kColourNames), "red");
  EXPECT_STREQ(enum_name(Colour::kGreen, kColourNames), "green");
}

TEST(EnumNames, UnlistedValueIsAQuestionMark) {
  EXPECT_STREQ(enum_name(Colour::kBlue, kColourNames), "?");
  EXPECT_STREQ(enum_name(static_cast<Colour>(77), kColourNames), "?");
}

}  // namespace
}  // namespace sluice
