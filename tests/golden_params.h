// The golden suites' parameter: "FORMAT" runs the model from that file form on
// the CPU backend, "FORMAT@BACKEND" on the named backend (the seam's other
// implementations reproduce the reference too); golden_params() adds one
// "gguf@BACKEND" per registered backend.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/backend_registry.h"

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

// The formats on the default backend (BackendOptions::name), then the GGUF
// on every other registered one ("gguf@reference", "gguf@cuda", ...).
inline std::vector<std::string> golden_params(std::vector<std::string> formats) {
  for (const RegisteredBackend& b : registered_backends())
    if (b.name != BackendOptions{}.name) formats.push_back(std::string("gguf@") + b.name);
  return formats;
}

// gtest names: "gguf@reference" -> "gguf_reference".
inline std::string golden_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '@', '_');
  return name;
}

}  // namespace sluice::testing
