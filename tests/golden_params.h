// The golden suites' parameter: "FORMAT" runs the model from that file form on
// the CPU backend, "FORMAT@BACKEND" on the named backend (the seam's other
// implementations reproduce the reference too).
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "backend/backend.h"

namespace sluice::testing {

struct GoldenParam {
  std::string format;
  std::shared_ptr<Backend> backend;  // null: the default (CPU)
  std::string skip;                  // why the backend cannot run here ("": it can)
};

// A backend that cannot be created here (cuda without a GPU or without nvcc)
// leaves `skip` set: the suite skips with that message.
inline GoldenParam parse_golden_param(const std::string& param) {
  const size_t at = param.find('@');
  GoldenParam g{.format = param.substr(0, at)};
  if (at != std::string::npos) {
    auto be = create_backend({.name = param.substr(at + 1)});
    if (be.ok()) g.backend = *be;
    else g.skip = be.status().to_string();
  }
  return g;
}

// gtest names: "gguf@reference" -> "gguf_reference".
inline std::string golden_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '@', '_');
  return name;
}

}  // namespace sluice::testing
