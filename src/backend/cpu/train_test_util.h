// What the CPU training operators' tests share: the instruction-set levels
// this machine can run (train_levels_test.cpp runs the op-case list's
// training cases at each).
#pragma once

#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/op_test_util.h"

namespace sluice::cpu::testing {

// Every instruction-set level this machine can run.
inline std::vector<Isa> train_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(max_supported_isa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

}  // namespace sluice::cpu::testing
