// The registry: every backend is either created or says why it cannot run
// here, unknown names are refused with the known ones, and --gpu-budget is
// refused for backends that do not take it.
#include "backend/backend_registry.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(BackendRegistry, EveryBackendIsCreatedOrSaysWhyNot) {
  const std::string help = describe_backends();
  ASSERT_FALSE(registered_backends().empty());
  for (const RegisteredBackend& b : registered_backends()) {
    SCOPED_TRACE(b.name);
    EXPECT_EQ(find_backend(b.name), &b);
    const std::string why = b.unavailable();
    StatusOr<std::shared_ptr<Backend>> be = create_backend({.name = b.name, .n_threads = 1});
    if (why.empty()) {
      ASSERT_TRUE(be.ok()) << be.status().to_string();
      EXPECT_EQ((*be)->name().rfind(b.name, 0), 0u) << (*be)->name();  // "cpu avx512" for "cpu"
    } else {
      // Known by name in every build: the reason, never "unknown backend".
      ASSERT_FALSE(be.ok());
      EXPECT_EQ(be.status().message().find("unknown backend"), std::string::npos) << be.status().to_string();
      EXPECT_NE(help.find(why), std::string::npos) << help;
    }
    EXPECT_NE(help.find(b.name), std::string::npos) << help;
  }
  EXPECT_NE(find_backend("cuda"), nullptr);  // named in builds without nvcc too
  EXPECT_TRUE(create_backend({.name = "reference"}).ok());
}

TEST(BackendRegistry, UnknownNamesAreRefusedWithTheKnownOnes) {
  auto bad = create_backend({.name = "tpu"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(backend_names()), std::string::npos) << bad.status().to_string();
  for (const RegisteredBackend& b : registered_backends())
    EXPECT_NE(backend_names().find(b.name), std::string::npos) << b.name;
  EXPECT_EQ(find_backend("tpu"), nullptr);
}

TEST(BackendRegistry, TheGpuBudgetIsForBackendsThatTakeIt) {
  for (const RegisteredBackend& b : registered_backends()) {
    if (b.uses_device_budget) continue;
    auto be = create_backend({.name = b.name, .device_budget_bytes = uint64_t{1} << 30});
    ASSERT_FALSE(be.ok()) << b.name;
    EXPECT_NE(be.status().message().find("--mem-budget"), std::string::npos) << be.status().to_string();
  }
}

}  // namespace
}  // namespace sluice
