// The instruction-set level the per-op suite runs at. The kernel tests loop over
// every level this CPU has; what dispatches on the process's level (the
// backend's ops, attention) runs at active_isa(), which SLUICE_ISA caps, so
// scripts/test runs the suite once per level. A level this CPU lacks would only
// repeat a lower one: under it the whole suite skips, saying so.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_features.h"

namespace sluice::cpu {
namespace {

class IsaLevelEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* asked = std::getenv("SLUICE_ISA");
    if (asked != nullptr) {
      for (int l = static_cast<int>(max_supported_isa()) + 1; l <= static_cast<int>(Isa::kAvx512); ++l) {
        if (std::strcmp(asked, isa_name(static_cast<Isa>(l))) == 0)
          GTEST_SKIP() << "SLUICE_ISA=" << asked << ", but this CPU's highest level is "
                       << isa_name(max_supported_isa()) << ": nothing to run that another level does not";
      }
    }
    std::printf("[isa] dispatch at %s (highest on this CPU: %s; features: %s)\n", isa_name(active_isa()),
                isa_name(max_supported_isa()), cpu_features_string().c_str());
  }
};

const ::testing::Environment* const kIsaLevel = ::testing::AddGlobalTestEnvironment(new IsaLevelEnvironment);

TEST(IsaLevel, SluiceIsaCapsTheActiveLevel) {
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(max_supported_isa()));
  const char* asked = std::getenv("SLUICE_ISA");
  if (asked != nullptr && std::strcmp(asked, "scalar") == 0) {
    EXPECT_EQ(active_isa(), Isa::kScalar);
  }
  if (asked != nullptr && std::strcmp(asked, "avx2") == 0) {
    EXPECT_LE(static_cast<int>(active_isa()), 1);
  }
  if (asked == nullptr) {
    EXPECT_EQ(active_isa(), max_supported_isa());
  }
}

}  // namespace
}  // namespace sluice::cpu
