// Runs the built sluice binary for end-to-end tests: stdout captured, stderr in
// a per-process temp file (so parallel ctest processes never share it).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace sluice::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A path under the test temp dir unique to this process. ctest runs every
// test in a process of its own, two at a time, so a file that several tests
// build under one fixed name would be written by two processes at once.
inline std::string cli_temp_path(const std::string& name) {
  return ::testing::TempDir() + "/sluice_cli_" + std::to_string(::getpid()) + "_" + name;
}

// A cli_temp_path removed when this is destroyed: as a function-local static,
// when the process exits, for a file the tests of one process share.
class ProcessTempFile {
 public:
  explicit ProcessTempFile(const std::string& name) : path_(cli_temp_path(name)) {}
  ~ProcessTempFile() { std::remove(path_.c_str()); }
  ProcessTempFile(const ProcessTempFile&) = delete;
  ProcessTempFile& operator=(const ProcessTempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `<binary> <args>` (args are passed to the shell as written).
inline CliResult run_binary(const std::string& binary, const std::string& args) {
  const std::string err_path = cli_temp_path("stderr.txt");
  const std::string cmd = binary + " " + args + " 2>" + err_path;
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "", "popen failed"};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::remove(err_path.c_str());
  return r;
}

// Runs `sluice <args>` (args are passed to the shell as written).
inline CliResult run_cli(const std::string& args) { return run_binary(SLUICE_BINARY, args); }

}  // namespace sluice::testing
