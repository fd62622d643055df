// The checking loop the CPU training operators' tests share: a case is run
// on the reference backend's TrainOps and on CpuBackend's at every level the
// machine has, and each output must
//   - be within the case's normalized-error bound of the reference's,
//   - repeat bit for bit when the same backend runs it again,
//   - be bit-identical with 1 and with 3 threads (the operators promise any
//     thread count gives the same bits),
//   - leave the guards around it intact (outputs are GuardedFloats, NaN-poisoned
//     unless the operator accumulates into them).
// A test is a table of cases and one run function: (TrainOps&, case) -> the
// op's outputs, built from inputs the case determines (fixed seeds).
#pragma once

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/reference_backend.h"

namespace sluice::cpu::testing {

// An op's outputs, each widened to double (exactly), in a fixed order.
using Outputs = std::vector<std::vector<double>>;

// Every instruction-set level this machine can run.
inline std::vector<Isa> train_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(max_supported_isa()); ++i) v.push_back(static_cast<Isa>(i));
  return v;
}

// A guarded output's payload, after checking its guards.
inline std::vector<double> take(const GuardedFloats& g, const std::string& what) {
  EXPECT_TRUE(g.guards_intact()) << what << ": wrote outside its output";
  return std::vector<double>(g.data(), g.data() + g.size());
}

// A guarded output holding `init` (for operators that accumulate).
inline GuardedFloats guarded_copy(const std::vector<float>& init) {
  GuardedFloats g(init.size());
  std::copy(init.begin(), init.end(), g.data());
  return g;
}

// Normalized squared error; infinite if a has a NaN or inf where ref has a
// number. An element both left as poisoned NaN (outside what the operator
// writes, e.g. rows in no attention sequence) is equal.
inline double nmse(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(ref[i])) continue;
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The loop above. bounds: the nmse bound of each output, in run()'s order.
template <class Case>
void check_against_reference(const Case& c, const std::function<Outputs(TrainOps&, const Case&)>& run,
                             const std::vector<double>& bounds) {
  ReferenceBackend ref;
  const Outputs want = run(*ref.train_ops(), c);
  ASSERT_EQ(want.size(), bounds.size()) << c.name;
  for (Isa isa : train_isas()) {
    CpuBackend one({.n_threads = 1, .isa = isa});
    CpuBackend three({.n_threads = 3, .isa = isa});
    const Outputs got = run(*one.train_ops(), c);
    const Outputs again = run(*one.train_ops(), c);
    const Outputs threaded = run(*three.train_ops(), c);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < want.size(); ++o) {
      const std::string where = std::string(c.name) + " at " + isa_name(isa) + ", output " + std::to_string(o);
      ASSERT_EQ(got[o].size(), want[o].size()) << where;
      EXPECT_LT(nmse(got[o], want[o]), bounds[o]) << where;
      EXPECT_TRUE(same_bits(got[o], again[o])) << where << ": differs from run to run";
      EXPECT_TRUE(same_bits(got[o], threaded[o])) << where << ": differs with 3 threads";
    }
  }
}

}  // namespace sluice::cpu::testing
