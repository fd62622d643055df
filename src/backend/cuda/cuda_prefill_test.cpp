// The tensor-core matmul path (cuda_prefill.h) against the reference backend
// at prefill-sized token counts, for every weight type the CUDA matmul reads.
//
// Error bound. The path rounds x, and every weight that is not BF16 already,
// to BF16 (8 significant bits: a relative error up to 2^-9, ~1.6e-3 rms per
// value), then sums in float. Per output the error is that of a sum of
// products each off by ~2e-3 relative, with random signs: ~2e-3 of the
// output's scale, a normalized squared error ~5e-6. kTensorCoreNmse allows
// 6x that; one mis-decoded weight in a row of 512 gives ~2e-3, a missing
// slice or a wrong row infinity or ~1. Counts below the threshold run the
// GEMV kernels and keep their own bounds (cuda_backend_test.cpp). Outputs
// are NaN-poisoned, so one left unwritten fails. Without a GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_prefill.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/reference_backend.h"

namespace sluice::cuda::testing {
namespace {


constexpr double kTensorCoreNmse = 3e-5;

// The bound of an output of type t at n_tok tokens (the defaults of cuda_prefill.h).
double bound(DType t, int64_t n_tok) {
  const int64_t min_tok =
      t == DType::kBF16 ? cuda::PrefillMatmul::kMinTokensBf16 : cuda::PrefillMatmul::kMinTokensDecoded;
  if (t != DType::kF32 && n_tok >= min_tok) return kTensorCoreNmse;
  // The dp4a kernels' 8-bit x (cuda_matmul_q8.cuh), or float x.
  return matmul_q8_takes({.type = t, .n_in = 512, .n_out = 1}) ? 4e-4 : 1e-9;
}

class CudaPrefill : public ::testing::TestWithParam<DType> {};

TEST_P(CudaPrefill, MatmulMatchesTheReferenceAtPrefillSizes) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const DType type = GetParam();
  const int64_t n_in = 512, n_out = 300;
  Matrix w(type, n_in, n_out, 11);
  auto prepared = to_device(*be, {&w.dev});
  for (int64_t n_tok : {1, 7, 16, 33, 512}) {
    be->reserve({.n_tok = n_tok, .n_in_max = n_in});
    ref.reserve({.n_tok = n_tok, .n_in_max = n_in});
    const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 12 + static_cast<uint32_t>(n_tok));
    Dev dx(*be, x), y(*be, n_tok * n_out);
    const MatmulOut o[1] = {{w.dev, y.p()}};
    be->matmul(o, dx.p(), n_in, n_tok);
    std::vector<float> ry(static_cast<size_t>(n_tok * n_out));
    const MatmulOut ro[1] = {{w.host, ry.data()}};
    ref.matmul(ro, x.data(), n_in, n_tok);
    const auto yg = y.host(*be);
    ASSERT_TRUE(all_finite(yg)) << n_tok << " tokens";
    EXPECT_LT(nmse(yg.data(), ry.data(), ry.size()), bound(type, n_tok)) << n_tok << " tokens";
  }
}

// The fused entry points: norm_matmul over three parts (one of 37 rows) and
// glu_matmul, at counts where Q4_0 / Q8_0 would otherwise take their 8-bit
// fused kernels.
TEST_P(CudaPrefill, NormMatmulAndGluMatmulMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const DType type = GetParam();
  const int64_t n_embd = 512, n_ff = 768, n_small = 37;
  Matrix gate(type, n_embd, n_ff, 1), up(type, n_embd, n_ff, 2), down(type, n_ff, n_embd, 3), small(type, n_embd, n_small, 6);
  auto prepared = to_device(*be, {&gate.dev, &up.dev, &down.dev, &small.dev});
  const auto norm = random_floats(static_cast<size_t>(n_embd), 5);
  for (int64_t n_tok : {33, 130}) {
    const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 4);
    be->reserve({.n_tok = n_tok, .n_in_max = n_ff});
    ref.reserve({.n_tok = n_tok, .n_in_max = n_ff});
    Dev dx(*be, x), xn(*be, n_tok * n_embd), g(*be, n_tok * n_ff), u(*be, n_tok * n_ff), y(*be, n_tok * n_embd);
    Dev sm(*be, n_tok * n_small);
    const MatmulOut gu[3] = {{small.dev, sm.p()}, {gate.dev, g.p()}, {up.dev, u.p()}};
    be->norm_matmul({.x = dx.p(), .norm = norm.data(), .eps = 1e-5f, .xn = xn.p(), .n_embd = n_embd, .n_tok = n_tok, .outs = gu});
    const auto g_gpu = g.host(*be), sm_gpu = sm.host(*be);
    be->glu_matmul({.gate = g.p(), .up = u.p(), .n_ff = n_ff, .n_tok = n_tok, .act = Activation::kSilu, .out = {down.dev, y.p()}});
    std::vector<float> rxn(x.size()), rg(static_cast<size_t>(n_tok * n_ff)), ru(rg.size()), ry(x.size());
    std::vector<float> rsm(static_cast<size_t>(n_tok * n_small));
    const MatmulOut rgu[3] = {{small.host, rsm.data()}, {gate.host, rg.data()}, {up.host, ru.data()}};
    ref.norm_matmul({.x = x.data(), .norm = norm.data(), .eps = 1e-5f, .xn = rxn.data(), .n_embd = n_embd, .n_tok = n_tok, .outs = rgu});
    // The gate before glu_matmul turns it into act(gate) * up in place, on both sides.
    ASSERT_TRUE(all_finite(g_gpu) && all_finite(sm_gpu));
    EXPECT_LT(nmse(g_gpu.data(), rg.data(), rg.size()), bound(type, n_tok)) << n_tok << " tokens, gate";
    EXPECT_LT(nmse(sm_gpu.data(), rsm.data(), rsm.size()), bound(type, n_tok)) << n_tok << " tokens, the 37-row part";
    ref.glu_matmul({.gate = rg.data(), .up = ru.data(), .n_ff = n_ff, .n_tok = n_tok, .act = Activation::kSilu, .out = {down.host, ry.data()}});
    const auto yg = y.host(*be);
    ASSERT_TRUE(all_finite(yg));
    // The down projection's input is itself off by the gate's error: twice the bound.
    EXPECT_LT(nmse(yg.data(), ry.data(), ry.size()), 2 * bound(type, n_tok)) << n_tok << " tokens, down";
  }
}

// q/k/v-like parts (256, 64 and 64 rows) share x: one merged GEMM, then split
// into each part's y (for BF16 because the three lie one after the other in
// the prepared arena, which the test checks).
TEST_P(CudaPrefill, PartsSharingXMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const DType type = GetParam();
  const int64_t n_in = 512, n_tok = 64;
  Matrix q(type, n_in, 256, 41), k(type, n_in, 64, 42), v(type, n_in, 64, 43);
  auto prepared = to_device(*be, {&q.dev, &k.dev, &v.dev});
  if (type == DType::kBF16) {
    ASSERT_EQ(k.dev.data, q.dev.data + 256 * n_in * 2) << "BF16 parts not adjacent: the merged GEMM is not exercised";
    ASSERT_EQ(v.dev.data, k.dev.data + 64 * n_in * 2);
  }
  be->reserve({.n_tok = n_tok, .n_in_max = n_in});
  ref.reserve({.n_tok = n_tok, .n_in_max = n_in});
  const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 44);
  Dev dx(*be, x), yq(*be, n_tok * 256), yk(*be, n_tok * 64), yv(*be, n_tok * 64);
  const MatmulOut o[3] = {{q.dev, yq.p()}, {k.dev, yk.p()}, {v.dev, yv.p()}};
  be->matmul(o, dx.p(), n_in, n_tok);
  std::vector<float> rq(static_cast<size_t>(n_tok * 256)), rk(static_cast<size_t>(n_tok * 64)), rv(rk.size());
  const MatmulOut ro[3] = {{q.host, rq.data()}, {k.host, rk.data()}, {v.host, rv.data()}};
  ref.matmul(ro, x.data(), n_in, n_tok);
  const std::vector<float>* refs[3] = {&rq, &rk, &rv};
  const Dev* ys[3] = {&yq, &yk, &yv};
  for (int p = 0; p < 3; ++p) {
    const auto y = ys[p]->host(*be);
    ASSERT_TRUE(all_finite(y)) << "part " << p;
    EXPECT_LT(nmse(y.data(), refs[p]->data(), y.size()), bound(type, n_tok)) << "part " << p;
  }
}

// The norm and the activation write the tensor-core matmul's BF16 x as they
// write their float output (no conversion pass between them): the same bits
// as the unfused calls, rmsnorm then matmul, and matmul over the activation's
// float output, which convert that output to BF16 themselves.
TEST_P(CudaPrefill, FusedBf16InputGivesTheBitsOfTheUnfusedCalls) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  const DType type = GetParam();
  const int64_t n_embd = 512, n_ff = 768, n_tok = 48;
  if (be->matmul_act_rounding(type, n_tok) != ActRounding::kBF16) {
    GTEST_SKIP() << dtype_name(type) << " does not take the tensor cores";  // F32: the exact float kernels
  }
  Matrix gate(type, n_embd, n_ff, 51), up(type, n_embd, n_ff, 52), down(type, n_ff, n_embd, 53);
  auto prepared = to_device(*be, {&gate.dev, &up.dev, &down.dev});
  be->reserve({.n_tok = n_tok, .n_in_max = n_ff});
  const auto norm = random_floats(static_cast<size_t>(n_embd), 54);
  const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 55);
  Dev dx(*be, x), xn(*be, n_tok * n_embd), g(*be, n_tok * n_ff), u(*be, n_tok * n_ff), y(*be, n_tok * n_embd);
  Dev xn2(*be, n_tok * n_embd), g2(*be, n_tok * n_ff), u2(*be, n_tok * n_ff), y2(*be, n_tok * n_embd);
  const MatmulOut gu[2] = {{gate.dev, g.p()}, {up.dev, u.p()}}, gu2[2] = {{gate.dev, g2.p()}, {up.dev, u2.p()}};
  be->norm_matmul({.x = dx.p(), .norm = norm.data(), .eps = 1e-5f, .xn = xn.p(), .n_embd = n_embd, .n_tok = n_tok,
                   .outs = gu});
  be->rmsnorm(dx.p(), norm.data(), 1e-5f, xn2.p(), n_tok, n_embd);
  be->matmul(gu2, xn2.p(), n_embd, n_tok);
  EXPECT_EQ(xn.host(*be), xn2.host(*be));
  const auto gate_out = g.host(*be);
  ASSERT_TRUE(all_finite(gate_out));
  EXPECT_EQ(gate_out, g2.host(*be));
  EXPECT_EQ(u.host(*be), u2.host(*be));
  // glu_matmul leaves act(gate) * up in gate: the unfused side multiplies that.
  be->glu_matmul({.gate = g.p(), .up = u.p(), .n_ff = n_ff, .n_tok = n_tok, .act = Activation::kSilu,
                  .out = {down.dev, y.p()}});
  const MatmulOut d2[1] = {{down.dev, y2.p()}};
  be->matmul(d2, g.p(), n_ff, n_tok);
  const auto yf = y.host(*be);
  ASSERT_TRUE(all_finite(yf));
  EXPECT_EQ(yf, y2.host(*be));
}

INSTANTIATE_TEST_SUITE_P(Types, CudaPrefill,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A decoded matrix larger than the scratch goes in slices of rows, each
// written at its offset in y (rows of 1200 bytes: unaligned slices of y), for
// GGUF rows and the split layout.
TEST(CudaPrefillSlices, AMatrixLargerThanTheScratchGoesInSlices) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();  // makes the device current
  ReferenceBackend ref;
  const int64_t n_in = 512, n_out = 300, n_tok = 40;
  cuda::PrefillMatmul pm(37 * n_in);  // slices of 37 rows
  ASSERT_TRUE(pm.on()) << "cuBLASLt did not initialise on a machine with a GPU";
  for (DType type : {DType::kQ4_K, DType::kQ4_0}) {
    Matrix w(type, n_in, n_out, 21);
    auto prepared = to_device(*be, {&w.dev});  // Q4_0: split scales (prepare_weights' layout)
    const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 22);
    Dev dx(*be, x), y(*be, n_tok * n_out);
    const MatmulOut o[1] = {{w.dev, y.p()}};
    ASSERT_TRUE(pm.takes(o, n_tok));
    ASSERT_TRUE(pm.run(o, dx.p(), n_in, n_tok, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> ry(static_cast<size_t>(n_tok * n_out));
    const MatmulOut ro[1] = {{w.host, ry.data()}};
    ref.reserve({.n_tok = n_tok, .n_in_max = n_in});
    ref.matmul(ro, x.data(), n_in, n_tok);
    const auto yg = y.host(*be);
    ASSERT_TRUE(all_finite(yg)) << dtype_name(type);
    EXPECT_LT(nmse(yg.data(), ry.data(), ry.size()), kTensorCoreNmse) << dtype_name(type);
  }
}

// Training's input gradient on the tensor cores (run_t): dx = W^T dy in
// slices of 40 rows (the last of 24), each adding its share at its columns of
// dy, overwriting dx or adding to it; a matrix with a row count that is not a
// multiple of 8 is left to the caller's kernels.
TEST(CudaPrefillSlices, TheInputGradientGoesInSlicesAndAccumulates) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const int64_t n_in = 512, n_out = 304, n_tok = 40;
  cuda::PrefillMatmul pm(45 * n_in);  // 40 rows a slice: a multiple of 8
  ASSERT_TRUE(pm.on()) << "cuBLASLt did not initialise on a machine with a GPU";
  for (DType type : {DType::kQ4_K, DType::kQ4_0, DType::kBF16}) {
    for (bool accumulate : {false, true}) {
      Matrix w(type, n_in, n_out, 31);
      auto prepared = to_device(*be, {&w.dev});
      const auto dy = random_floats(static_cast<size_t>(n_tok * n_out), 32);
      const auto dx0 = random_floats(static_cast<size_t>(n_tok * n_in), 33);
      Dev ddy(*be, dy), ddx(*be, dx0);
      ASSERT_TRUE(pm.takes_t(w.dev, ddy.p(), n_tok)) << dtype_name(type);
      ASSERT_TRUE(pm.run_t(w.dev, ddy.p(), ddx.p(), n_tok, accumulate, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> rdx = dx0;
      ref.train_ops()->reserve({.n_tok = n_tok, .n_ctx = 1, .n_head = 1, .head_dim = 1, .n_in_max = n_in});
      ref.train_ops()->matmul_t({.w = w.host, .dy = dy.data(), .dx = rdx.data(), .n_tok = n_tok,
                                 .accumulate = accumulate});
      const auto got = ddx.host(*be);
      ASSERT_TRUE(all_finite(got)) << dtype_name(type);
      EXPECT_LT(nmse(got.data(), rdx.data(), rdx.size()), kTensorCoreNmse)
          << dtype_name(type) << (accumulate ? " accumulating" : "");
    }
  }
  Matrix odd(DType::kQ4_K, n_in, 300, 34);
  auto prepared = to_device(*be, {&odd.dev});
  Dev ddy(*be, random_floats(static_cast<size_t>(n_tok * 300), 35));
  EXPECT_FALSE(pm.takes_t(odd.dev, ddy.p(), n_tok)) << "300 rows: slices of dy's columns would lose their alignment";
  EXPECT_FALSE(pm.takes_t(odd.dev, ddy.p(), 8)) << "below the token threshold";
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
