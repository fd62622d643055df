// Replays every input the fuzzers once crashed on (tests/fuzz/regressions/
// <harness>/*) through the same harness function, so each fixed crash, leak or
// sanitizer report stays fixed; and the seed corpora (corpus/<harness>/), so the
// harnesses keep building and running in the normal suite. Passing means no crash: the harnesses abort on
// a broken invariant, and the parsers answer these inputs with an error Status.
// scripts/test also runs this binary under ASan + UBSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "harnesses.h"

namespace sluice::fuzz {
namespace {

namespace fs = std::filesystem;

// The files of tests/fuzz/<kind>/<harness>/, sorted.
std::vector<fs::path> saved_inputs(const char* kind, const std::string& harness) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(SLUICE_FUZZ_DIR) / kind / harness;
  if (!fs::is_directory(dir)) return files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class FuzzRegressionTest : public ::testing::TestWithParam<Harness> {};

void run_all(const Harness& h, const std::vector<fs::path>& files) {
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.string());
    std::ifstream f(path, std::ios::binary);
    ASSERT_TRUE(f) << "cannot read " << path;
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), {}};
    h.run(bytes.data(), bytes.size());
  }
}

TEST_P(FuzzRegressionTest, EverySavedFindingRunsCleanly) {
  const std::vector<fs::path> files = saved_inputs("regressions", GetParam().name);
  if (files.empty()) GTEST_SKIP() << "no saved findings for " << GetParam().name;
  run_all(GetParam(), files);
}

TEST_P(FuzzRegressionTest, EverySeedRunsCleanly) {
  const std::vector<fs::path> files = saved_inputs("corpus", GetParam().name);
  EXPECT_FALSE(files.empty()) << "no seeds for " << GetParam().name;
  run_all(GetParam(), files);
}

INSTANTIATE_TEST_SUITE_P(Harnesses, FuzzRegressionTest, ::testing::ValuesIn(kHarnesses),
                         [](const ::testing::TestParamInfo<Harness>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sluice::fuzz
