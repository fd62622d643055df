// matmul_t on the CPU beyond the op-case list (op_cases_train_test.cpp: every
// weight type against the reference, at every level in train_levels_test.cpp):
// what it supports, the repacked layouts against GGUF rows bit for bit, a
// token alone against its row in a batch of 100, and the levels' vector
// dequantizers against dequantize_row bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_t.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

using testing::random_floats;

// Quantized weights of a case (fixed seed).
std::vector<uint8_t> weights(DType type, int64_t n_out, int64_t n_in) {
  const std::vector<float> wf = random_floats(static_cast<size_t>(n_out * n_in), 11, 0.1f);
  std::vector<uint8_t> w(row_bytes(type, n_in) * static_cast<size_t>(n_out));
  quantize_tensor(type, wf.data(), w.data(), n_out, n_in);
  return w;
}

TEST(CpuMatmulT, SupportsWhatTheMatmulTakes) {
  CpuBackend be({.n_threads = 1});
  const TrainOps& ops = *be.train_ops();
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL,
                  DType::kIQ4_XS}) {
    EXPECT_EQ(ops.supports_matmul_t(t, WeightLayout::kRows), matmul_supports(t)) << dtype_name(t);
  }
  for (WeightLayout l : kRepackedLayouts) {
    EXPECT_TRUE(ops.supports_matmul_t(repacked_type(l), l)) << layout_name(l);
    EXPECT_FALSE(ops.supports_matmul_t(DType::kF16, l)) << layout_name(l);
  }
  EXPECT_FALSE(ops.supports_matmul_t(DType::kQ4_0, WeightLayout::kSplitScales));
}

// A repacked matrix holds the GGUF bytes in another order: matmul_t reads it
// back to the same values, so the result is bit-identical to GGUF rows.
TEST(CpuMatmulT, RepackedLayoutsEqualRows) {
  const int64_t n_out = 48, n_in = 320, n_tok = 11;
  const std::vector<float> dy = random_floats(static_cast<size_t>(n_tok * n_out), 21);
  for (Isa isa : testing::supported_isas()) {
    CpuBackend be({.n_threads = 2, .isa = isa});
    TrainOps& ops = *be.train_ops();
    ops.reserve({.n_tok = n_tok, .n_in_max = n_in});
    for (WeightLayout l : kRepackedLayouts) {
      const DType type = repacked_type(l);
      const std::vector<uint8_t> w = weights(type, n_out, n_in);
      std::vector<uint8_t> packed(w.size());
      repack_rows(l, w.data(), packed.data(), n_in, 0, n_out);
      std::vector<float> want(static_cast<size_t>(n_tok * n_in)), got(want.size());
      ops.matmul_t({.w = {.type = type, .data = w.data(), .n_in = n_in, .n_out = n_out}, .dy = dy.data(),
                    .dx = want.data(), .n_tok = n_tok});
      ops.matmul_t({.w = {.type = type, .data = packed.data(), .n_in = n_in, .n_out = n_out, .layout = l},
                    .dy = dy.data(), .dx = got.data(), .n_tok = n_tok});
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << layout_name(l) << " at " << isa_name(isa);
    }
  }
}

// Token t of a batch gives the bits token t gives alone (a dx row depends on
// its dy row only, whatever tile it falls in).
TEST(CpuMatmulT, OneTokenAloneEqualsItsRowInABatch) {
  const int64_t n_out = 130, n_in = 768, n_tok = 100;
  const std::vector<uint8_t> w = weights(DType::kQ4_K, n_out, n_in);
  const std::vector<float> dy = random_floats(static_cast<size_t>(n_tok * n_out), 31);
  for (Isa isa : testing::supported_isas()) {
    CpuBackend be({.n_threads = 2, .isa = isa});
    TrainOps& ops = *be.train_ops();
    ops.reserve({.n_tok = n_tok, .n_in_max = n_in});
    const WeightView wv{.type = DType::kQ4_K, .data = w.data(), .n_in = n_in, .n_out = n_out};
    std::vector<float> batch(static_cast<size_t>(n_tok * n_in)), one(static_cast<size_t>(n_in));
    ops.matmul_t({.w = wv, .dy = dy.data(), .dx = batch.data(), .n_tok = n_tok});
    for (int64_t t : {0, 5, 95, 99}) {
      ops.matmul_t({.w = wv, .dy = dy.data() + t * n_out, .dx = one.data(), .n_tok = 1});
      EXPECT_EQ(std::memcmp(one.data(), batch.data() + t * n_in, one.size() * sizeof(float)), 0)
          << "token " << t << " at " << isa_name(isa);
    }
  }
}

TEST(TrainKernels, VectorDequantizationEqualsDequantizeRow) {
  const int64_t n = 512;
  const std::vector<float> x = random_floats(n, 41, 0.3f);
  for (Isa isa : testing::supported_isas()) {
    const TrainKernels& kn = train_kernels(isa);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                    DType::kQ6_K, DType::kQ4_1, DType::kIQ4_XS}) {
      std::vector<uint8_t> q(row_bytes(t, n));
      quantize_row(t, x.data(), q.data(), n);
      std::vector<float> want(n), got(n, std::numeric_limits<float>::quiet_NaN());
      dequantize_row(t, q.data(), want.data(), n);
      const bool fast = kn.dequantize(t, q.data(), n / dtype_traits(t).block_size, got.data());
      // Every level from AVX2 up has vector paths for these; the rest fall back.
      const bool expect_fast = isa != Isa::kScalar && t != DType::kQ4_1 && t != DType::kIQ4_XS;
      EXPECT_EQ(fast, expect_fast) << dtype_name(t) << " at " << isa_name(isa);
      if (fast) {
        EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0) << dtype_name(t) << " at " << isa_name(isa);
      }
    }
  }
}

}  // namespace
}  // namespace sluice::cpu
