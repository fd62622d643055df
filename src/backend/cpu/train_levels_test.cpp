// The op-case list's training cases (TrainOps, and the LoRA operator they
// rest on) on the CPU backend at every instruction-set level this machine has,
// beyond the list's own run at the highest one (backend_test.cpp): weights as
// GGUF rows, each output within its tolerance of the reference backend's,
// the same bits when the same backend runs it again, and the same bits with 1
// and with 3 threads (the operators promise any thread count gives the same
// bits).
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/op_cases.h"
#include "backend/reference_backend.h"

namespace sluice::cpu {
namespace {

using op_cases::OpOutputs;
using op_cases::run_case;

bool is_training_case(const op_cases::OpCaseEntry& e) {
  for (Op op : e.ops)
    if (!is_train_op(op) && op != Op::kLora) return false;
  return true;
}

std::vector<size_t> training_cases() {
  std::vector<size_t> v;
  const op_cases::OpCaseList& list = op_cases::op_case_list();
  for (size_t i = 0; i < list.size(); ++i)
    if (is_training_case(list[i])) v.push_back(i);
  return v;
}

bool same_bits(const OpOutputs& a, const OpOutputs& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].values.size() != b[i].values.size() ||
        std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)) != 0)
      return false;
  return true;
}

class CpuTrainLevels : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuTrainLevels, MatchTheReferenceAndRepeatAtEveryThreadCount) {
  std::unique_ptr<op_cases::OpCase> c = op_cases::op_case_list()[GetParam()].make();
  const int64_t n = c->n_tok();
  ReferenceBackend ref;
  const OpOutputs want = run_case(*c, ref, false, 0, n);
  for (Isa isa : testing::supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    CpuBackend one({.n_threads = 1, .isa = isa});
    CpuBackend three({.n_threads = 3, .isa = isa});
    ASSERT_TRUE(c->supported_by(one));
    const OpOutputs got = run_case(*c, one, false, 0, n);
    op_cases::compare(got, want);
    EXPECT_TRUE(same_bits(got, run_case(*c, one, false, 0, n))) << "differs from run to run";
    EXPECT_TRUE(same_bits(got, run_case(*c, three, false, 0, n))) << "differs with 3 threads";
  }
}

INSTANTIATE_TEST_SUITE_P(OpCases, CpuTrainLevels, ::testing::ValuesIn(training_cases()),
                         [](const auto& info) { return op_cases::op_case_list()[info.param].name; });

}  // namespace
}  // namespace sluice::cpu
