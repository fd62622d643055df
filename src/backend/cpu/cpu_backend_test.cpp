// What the CPU backend promises beyond the op-case list (backend_test.cpp):
// prepared (repacked) weights give the bits of GGUF rows, and supports()
// names what it runs.
#include "backend/cpu/cpu_backend.h"

#include <cstring>

#include <gtest/gtest.h>

#include "backend/op_cases.h"

namespace sluice::cpu {
namespace {

using op_cases::Matrix;
using testing::GuardedFloats;
using testing::random_floats;

class CpuBackendTypes : public ::testing::TestWithParam<DType> {};

TEST_P(CpuBackendTypes, PreparedWeightsGiveTheBitsOfGgufRows) {
  const DType type = GetParam();
  const int64_t n_in = 256, n_out = 64, n_tok = 5;
  CpuBackend cpu({.n_threads = 2});
  cpu.reserve({.n_tok = n_tok, .n_in_max = n_in});
  Matrix q(type, n_in, n_out, 7), k(type, n_in, n_out, 8);
  WeightView pq = q.view, pk = k.view;
  WeightView* group[2] = {&pq, &pk};
  const WeightGroup groups[1] = {group};
  const PreparedWeights prepared = cpu.prepare_weights(groups);
  if (cpu.isa() != Isa::kScalar) {
    EXPECT_NE(pq.data, q.view.data);  // copied into the backend's arena
  }
  const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 9);
  GuardedFloats y0(n_tok * n_out), y1(n_tok * n_out), z0(n_tok * n_out), z1(n_tok * n_out);
  const MatmulOut rows[2] = {{q.view, y0.data()}, {k.view, z0.data()}};
  const MatmulOut packed[2] = {{pq, y1.data()}, {pk, z1.data()}};
  cpu.matmul(rows, x.data(), n_in, n_tok);
  cpu.matmul(packed, x.data(), n_in, n_tok);
  EXPECT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * 4), 0);
  EXPECT_EQ(std::memcmp(z0.data(), z1.data(), z0.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, CpuBackendTypes,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuBackend, SupportsSaysWhatItRuns) {
  CpuBackend cpu({.n_threads = 1});
  EXPECT_TRUE(cpu.supports(Op::kMatmul, {.weight = DType::kQ4_K}));
  EXPECT_TRUE(cpu.supports(Op::kGluMatmul, {.weight = DType::kQ8_0, .act = Activation::kGelu}));
  EXPECT_FALSE(cpu.supports(Op::kExpertFfn, {.weight = DType::kQ8_0, .act = Activation::kGelu}));
  // Training's forward_matmul takes F32 weights; the Backend's matmul the rest.
  EXPECT_TRUE(cpu.supports(Op::kForwardMatmul, {.weight = DType::kF32}));
  EXPECT_FALSE(cpu.supports(Op::kForwardMatmul, {.weight = DType::kQ8_0}));
  for (Op op : kAllOps)
    if (op != Op::kForwardMatmul) EXPECT_TRUE(cpu.supports(op, {.weight = DType::kQ8_0})) << op_name(op);
}

TEST(CpuBackend, RoundsActivationsAsItsKernelsDo) {
  CpuBackend cpu({.n_threads = 1});
  EXPECT_EQ(cpu.matmul_act_rounding(DType::kF32, 1), ActRounding::kNone);
  EXPECT_EQ(cpu.matmul_act_rounding(DType::kF16, 1), ActRounding::kNone);
  EXPECT_EQ(cpu.matmul_act_rounding(DType::kQ4_0, 1), ActRounding::kInt8Blocks32);
  EXPECT_EQ(cpu.matmul_act_rounding(DType::kIQ4_NL, 1), ActRounding::kInt8Blocks32);
  EXPECT_EQ(cpu.matmul_act_rounding(DType::kQ6_K, 1), ActRounding::kInt8Blocks256);
  EXPECT_EQ(CpuBackend({.n_threads = 1, .isa = Isa::kScalar}).matmul_act_rounding(DType::kBF16, 1), ActRounding::kNone);
}

}  // namespace
}  // namespace sluice::cpu
