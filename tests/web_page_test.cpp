// The live page (GET / of `sluice serve`) in a real browser: tests/web/page.mjs
// drives Debian's chromium headless with Playwright (playwright-core from npm,
// pinned in tests/web/package-lock.json; scripts/install-deps installs both)
// against servers of stories260K and of the shipped stories-moe with its experts
// streamed. Skipped, saying why, without node, chromium or the package.
//
// SCREENSHOT_DIR=DIR in the environment also writes the page's screenshots
// during a streamed run (dense and MoE) there: docs/ holds the ones the README shows.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "base/test_data.h"

namespace sluice {
namespace {

const std::string kWebDir = std::string(SLUICE_SOURCE_DIR) + "/tests/web";

std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// The browser Playwright drives: $CHROMIUM, else Debian's.
std::string chromium() {
  const char* env = std::getenv("CHROMIUM");
  return env && *env ? env : "/usr/bin/chromium";
}

// Why the browser tests cannot run here, or "".
std::string missing_prerequisite() {
  if (run("command -v node").first != 0) return "node is not installed (scripts/install-deps installs nodejs)";
  if (!testing::path_exists(chromium()))
    return chromium() + " is not installed (scripts/install-deps installs Debian's chromium)";
  if (!testing::path_exists(kWebDir + "/node_modules/playwright-core/package.json"))
    return "playwright-core is not in " + kWebDir + "/node_modules (run scripts/install-deps)";
  return "";
}

TEST(WebPage, InChromiumChatStreamsStopsEscapesAndThePanelsFollowTheServer) {
  SKIP_UNLESS_EXISTS(testing::model_path("stories260K/stories260K.gguf"));
  if (const std::string why = missing_prerequisite(); !why.empty()) GTEST_SKIP() << why;
  const std::string cmd = "cd " + kWebDir + " && SLUICE_BINARY='" + SLUICE_BINARY + "' SLUICE_SHARED_DIR='" +
                          testing::shared_dir() + "' SLUICE_SOURCE_DIR='" + SLUICE_SOURCE_DIR + "' CHROMIUM='" +
                          chromium() + "' timeout 300 node page.mjs";
  auto [code, out] = run(cmd);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("all page checks passed"), std::string::npos) << out;
  EXPECT_EQ(out.find("not ok"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace sluice
