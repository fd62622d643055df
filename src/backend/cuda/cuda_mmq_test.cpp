// The int8 tensor-core matmul (cuda_mmq.cu, cuda_mmq_formats.cuh) against
// the dp4a kernels it stands in for past 8 tokens: the same block dot
// products, added in another order, so every output within float rounding of
// the dp4a one (which CudaMatmulQ8 holds to the host); for every type they
// take (Q4_0 and Q8_0 also with split scales), 9 to 40 tokens (one and two
// passes), rows not a multiple of a block's 16, two parts in one launch. A
// token's outputs do not depend on the batch around it. Outputs are
// NaN-poisoned, so a row or token a launch skips fails. Without a usable GPU
// every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_test_util.h"
#include "quant/split_scales.h"

namespace sluice::cuda::testing {
namespace {

// A matrix [n_out, n_in] of `type` in `layout`, on the device.
std::unique_ptr<DevMem> matrix(DType type, WeightLayout layout, int64_t n_in, int64_t n_out, uint32_t seed) {
  const auto f = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
  std::vector<uint8_t> rows(row_bytes(type, n_in) * static_cast<size_t>(n_out)), out(rows.size());
  quantize_tensor(type, f.data(), rows.data(), n_out, n_in);
  if (layout == WeightLayout::kSplitScales) split_scales(type, rows.data(), n_out, n_in, out.data());
  else out = rows;
  auto d = std::make_unique<DevMem>(out.size());
  copy_to_device(d->p, out.data(), out.size());
  return d;
}

// y[p] for both kernels: [n_tok, n_out[p]] each, read back.
struct Outputs {
  std::vector<std::vector<float>> mmq, dp4a;
};

Outputs run_both(DType type, WeightLayout layout, int64_t n_in, const std::vector<int64_t>& n_outs,
                 const std::vector<float>& x, int64_t n_tok) {
  std::vector<std::unique_ptr<DevMem>> mats;
  std::vector<WeightView> ws;
  for (size_t p = 0; p < n_outs.size(); ++p) {
    mats.push_back(matrix(type, layout, n_in, n_outs[p], 11 + static_cast<uint32_t>(p)));
    ws.push_back(
        {.type = type, .data = mats.back()->as<uint8_t>(), .n_in = n_in, .n_out = n_outs[p], .layout = layout});
  }
  DevMem dx(x.size() * sizeof(float));
  copy_to_device(dx.p, x.data(), x.size() * sizeof(float));
  DevMem q(static_cast<size_t>(n_tok * n_in)), d(static_cast<size_t>(n_tok * n_in / 32) * 4),
      s(static_cast<size_t>(n_tok * n_in / 32) * 4);
  const QuantizedX qx{.q = q.as<int8_t>(), .d = d.as<float>(), .s = s.as<float>(), .n_in = n_in};
  quantize_x(dx.as<float>(), n_in, n_in, n_tok, qx, nullptr);
  Outputs out;
  for (int kernel = 0; kernel < 2; ++kernel) {
    std::vector<std::unique_ptr<DevMem>> ys;
    std::vector<float*> yp;
    for (int64_t n_out : n_outs) {
      const std::vector<float> nan(static_cast<size_t>(n_tok * n_out), std::nanf(""));
      ys.push_back(std::make_unique<DevMem>(nan.size() * sizeof(float)));
      copy_to_device(ys.back()->p, nan.data(), nan.size() * sizeof(float));
      yp.push_back(ys.back()->as<float>());
    }
    if (kernel == 0) launch_matmul_mmq(ws, yp, qx, n_tok, nullptr);
    else launch_matmul_q8(ws, yp, qx, n_tok, nullptr);
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
    auto& dst = kernel == 0 ? out.mmq : out.dp4a;
    for (size_t p = 0; p < ys.size(); ++p) {
      std::vector<float> h(static_cast<size_t>(n_tok * n_outs[p]));
      copy_to_host(h.data(), ys[p]->p, h.size() * sizeof(float));
      dst.push_back(std::move(h));
    }
  }
  return out;
}

TEST(CudaMmq, MatchesTheDp4aKernelsWithinFloatRounding) {
  SKIP_WITHOUT_GPU();
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ4_1, DType::kQ5_0,
                     DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K, DType::kQ3_K}) {
    const bool legacy = type == DType::kQ4_0 || type == DType::kQ8_0;
    for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kSplitScales}) {
      if (!legacy && layout == WeightLayout::kSplitScales) continue;  // GGUF rows only
      for (int64_t n_tok : legacy ? std::vector<int64_t>{9, 16, 23, 32, 40} : std::vector<int64_t>{9, 23, 40}) {
        for (int64_t n_in : {256, 2048}) {
          SCOPED_TRACE(std::string(dtype_name(type)) + (layout == WeightLayout::kRows ? " rows" : " split") +
                       " n_tok=" + std::to_string(n_tok) + " n_in=" + std::to_string(n_in));
          const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 3);
          const Outputs o = run_both(type, layout, n_in, {37, 64}, x, n_tok);
          for (size_t p = 0; p < o.mmq.size(); ++p) {
            double err = 0, ref = 0;
            for (size_t i = 0; i < o.mmq[p].size(); ++i) {
              ASSERT_FALSE(std::isnan(o.mmq[p][i])) << "part " << p << " output " << i << " not written";
              err += std::pow(static_cast<double>(o.mmq[p][i]) - o.dp4a[p][i], 2);
              ref += std::pow(static_cast<double>(o.dp4a[p][i]), 2);
            }
            EXPECT_LT(err, 1e-11 * ref) << "part " << p;
          }
        }
      }
    }
  }
}

TEST(CudaMmq, ATokensOutputsDoNotDependOnTheBatch) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kIn = 512;
  const auto all = random_floats(static_cast<size_t>(30 * kIn), 4);
  // Tokens 5..14 inside a batch of 30 and inside one of 10.
  const std::vector<float> sub(all.begin() + 5 * kIn, all.begin() + 15 * kIn);
  for (const auto& [type, layout] : {std::pair{DType::kQ4_0, WeightLayout::kSplitScales},
                                     std::pair{DType::kQ4_K, WeightLayout::kRows},
                                     std::pair{DType::kQ2_K, WeightLayout::kRows}}) {
    SCOPED_TRACE(dtype_name(type));
    const Outputs big = run_both(type, layout, kIn, {100}, all, 30);
    const Outputs small = run_both(type, layout, kIn, {100}, sub, 10);
    EXPECT_EQ(0, std::memcmp(small.mmq[0].data(), big.mmq[0].data() + 5 * 100, 10 * 100 * sizeof(float)));
  }
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
