// The dp4a kernels (cuda_matmul_q8.cu) against the host: each output is the
// dequantized weights (quant/quant.h's dequantize_row) times the very 8-bit x
// the kernels read (x quantized on the device, then read back: x_i = d_b *
// q_i), added in double. What is left is float rounding, so a unit cut wrong
// (a nibble, a fifth bit, a codebook value, a 6-bit scale or min, an x block
// of a super-block) fails by orders of magnitude. For every type the kernels
// take, in GGUF rows: 1 to 11 tokens (every pass width and a last short pass),
// three parts in one launch, rows past 8192 (two a warp), rows of an odd count
// of super-blocks (Q6_K's and Q3_K's every other one 2 bytes past a 4-byte
// boundary, as Q5_0's and IQ4_NL's every other block); a token's outputs do not
// depend on the batch; matrices not aligned for a format's loads are not
// taken. Outputs are NaN-poisoned, so a row or token a launch skips fails.
// Without a usable GPU every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/cuda/cuda_test_util.h"

namespace sluice::cuda::testing {
namespace {

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ8_0,  DType::kQ4_K,   DType::kQ5_K,  DType::kQ6_K,
                            DType::kQ4_1, DType::kQ5_0,  DType::kQ5_1,   DType::kIQ4_NL, DType::kIQ4_XS,
                            DType::kQ2_K, DType::kQ3_K};

// x of n_tok rows quantized on the device, and its host copy.
struct QX {
  std::unique_ptr<DevMem> q, d, s;
  QuantizedX dev;
  std::vector<int8_t> hq;
  std::vector<float> hd;
};

QX quantize(const std::vector<float>& x, int64_t n_in, int64_t n_tok) {
  QX r;
  const auto nb = static_cast<size_t>(n_tok * n_in / 32);
  r.q = std::make_unique<DevMem>(static_cast<size_t>(n_tok * n_in));
  r.d = std::make_unique<DevMem>(nb * 4);
  r.s = std::make_unique<DevMem>(nb * 4);
  r.dev = {.q = r.q->as<int8_t>(), .d = r.d->as<float>(), .s = r.s->as<float>(), .n_in = n_in};
  DevMem dx(x.size() * sizeof(float));
  copy_to_device(dx.p, x.data(), x.size() * sizeof(float));
  quantize_x(dx.as<float>(), n_in, n_in, n_tok, r.dev, nullptr);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
  r.hq.resize(static_cast<size_t>(n_tok * n_in));
  r.hd.resize(nb);
  copy_to_host(r.hq.data(), r.q->p, r.hq.size());
  copy_to_host(r.hd.data(), r.d->p, nb * 4);
  return r;
}

// A matrix of `type` in GGUF rows: its bytes on the device, its rows dequantized on the host.
struct Mat {
  std::unique_ptr<DevMem> dev;
  std::vector<float> w;  // [n_out, n_in]
  WeightView view;
};

Mat matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  const auto f = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
  std::vector<uint8_t> rows(row_bytes(type, n_in) * static_cast<size_t>(n_out));
  quantize_tensor(type, f.data(), rows.data(), n_out, n_in);
  Mat m;
  m.dev = std::make_unique<DevMem>(rows.size());
  copy_to_device(m.dev->p, rows.data(), rows.size());
  m.w.resize(f.size());
  for (int64_t o = 0; o < n_out; ++o)
    dequantize_row(type, rows.data() + o * row_bytes(type, n_in), m.w.data() + o * n_in, n_in);
  m.view = {.type = type, .data = m.dev->as<uint8_t>(), .n_in = n_in, .n_out = n_out};
  return m;
}

// launch_matmul_q8 over the matrices, each output read back ([n_tok, n_out] each).
std::vector<std::vector<float>> run(const std::vector<Mat>& ms, const QuantizedX& qx, int64_t n_tok) {
  std::vector<WeightView> ws;
  std::vector<std::unique_ptr<DevMem>> ys;
  std::vector<float*> yp;
  for (const Mat& m : ms) {
    ws.push_back(m.view);
    const std::vector<float> nan(static_cast<size_t>(n_tok * m.view.n_out), std::nanf(""));
    ys.push_back(std::make_unique<DevMem>(nan.size() * sizeof(float)));
    copy_to_device(ys.back()->p, nan.data(), nan.size() * sizeof(float));
    yp.push_back(ys.back()->as<float>());
  }
  launch_matmul_q8(ws, yp, qx, n_tok, nullptr);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(nullptr));
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < ms.size(); ++p) {
    std::vector<float> h(static_cast<size_t>(n_tok * ms[p].view.n_out));
    copy_to_host(h.data(), ys[p]->p, h.size() * sizeof(float));
    out.push_back(std::move(h));
  }
  return out;
}

// The outputs against the dequantized weights times the quantized x, in double.
void expect_matches_host(const std::vector<Mat>& ms, const QX& x, int64_t n_tok) {
  const auto got = run(ms, x.dev, n_tok);
  for (size_t p = 0; p < ms.size(); ++p) {
    const int64_t n_in = ms[p].view.n_in, n_out = ms[p].view.n_out;
    double err = 0, ref = 0;
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t o = 0; o < n_out; ++o) {
        double want = 0;
        for (int64_t i = 0; i < n_in; ++i)
          want += static_cast<double>(ms[p].w[static_cast<size_t>(o * n_in + i)]) *
                  x.hd[static_cast<size_t>((t * n_in + i) / 32)] * x.hq[static_cast<size_t>(t * n_in + i)];
        const float y = got[p][static_cast<size_t>(t * n_out + o)];
        ASSERT_FALSE(std::isnan(y)) << "part " << p << " token " << t << " row " << o << " not written";
        err += (y - want) * (y - want);
        ref += want * want;
      }
    EXPECT_LT(err, 1e-11 * ref) << "part " << p;
  }
}

TEST(CudaMatmulQ8, EveryTypeMatchesTheHostOnTheSameQuantizedX) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kIn = 768;  // K-quants: 3 super-blocks, 12 units (fewer than a warp's lanes); Q6_K rows 630 bytes
  for (DType type : kTypes) {
    std::vector<Mat> ms;
    for (int64_t n_out : {300, 64, 37}) ms.push_back(matrix(type, kIn, n_out, 7 + static_cast<uint32_t>(n_out)));
    for (int64_t n_tok : {1, 2, 3, 5, 8, 11}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " n_tok=" + std::to_string(n_tok));
      const QX x = quantize(random_floats(static_cast<size_t>(n_tok * kIn), 20 + static_cast<uint32_t>(n_tok)), kIn,
                            n_tok);
      expect_matches_host(ms, x, n_tok);
    }
  }
}

TEST(CudaMatmulQ8, LongRowsAndManyRows) {
  SKIP_WITHOUT_GPU();
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    // 4096 inputs: Q4_K's 64 units take every lane twice; 8192 rows take two a warp.
    std::vector<Mat> wide;
    wide.push_back(matrix(type, 4096, 40, 3));
    const QX x1 = quantize(random_floats(2 * 4096, 4), 4096, 2);
    expect_matches_host(wide, x1, 2);
    std::vector<Mat> tall;
    tall.push_back(matrix(type, 256, 8192 + 6, 5));
    const QX x2 = quantize(random_floats(3 * 256, 6), 256, 3);
    expect_matches_host(tall, x2, 3);
  }
}

TEST(CudaMatmulQ8, ATokensOutputsDoNotDependOnTheBatch) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kIn = 512;
  const auto all = random_floats(static_cast<size_t>(11 * kIn), 9);
  // Tokens 3..7 inside a batch of 11 (passes of 8 and 2 + 1) and alone as a batch of 5 (4 + 1).
  const std::vector<float> sub(all.begin() + 3 * kIn, all.begin() + 8 * kIn);
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    std::vector<Mat> ms;
    ms.push_back(matrix(type, kIn, 100, 1));
    const QX xa = quantize(all, kIn, 11), xs = quantize(sub, kIn, 5);
    const auto big = run(ms, xa.dev, 11), small = run(ms, xs.dev, 5);
    EXPECT_EQ(0, std::memcmp(big[0].data() + 3 * 100, small[0].data(), small[0].size() * sizeof(float)));
  }
}

TEST(CudaMatmulQ8, TakesEachTypeOnlyAlignedForItsLoads) {
  alignas(16) static const uint8_t kBytes[32] = {};
  const WeightView aligned{.type = DType::kQ4_K, .data = kBytes, .n_in = 256, .n_out = 1};
  EXPECT_TRUE(matmul_q8_takes(aligned));
  WeightView split = aligned;
  split.layout = WeightLayout::kSplitScales;
  EXPECT_FALSE(matmul_q8_takes(split));  // split scales: Q4_0 / Q8_0 only, 16-byte aligned
  split.type = DType::kQ4_0;
  EXPECT_TRUE(matmul_q8_takes(split));
  split.data = kBytes + 8;
  EXPECT_FALSE(matmul_q8_takes(split));
  // The alignment each format needs, and the one just short of it.
  const struct {
    DType type;
    int64_t n_in;
    int need;
  } kCases[] = {{DType::kQ4_0, 32, 2},   {DType::kQ8_0, 32, 2},  {DType::kQ4_K, 256, 16}, {DType::kQ5_K, 256, 16},
                {DType::kQ6_K, 256, 4},  {DType::kQ3_K, 256, 4}, {DType::kQ2_K, 256, 4},  {DType::kQ4_1, 32, 4},
                {DType::kQ5_1, 32, 8},   {DType::kIQ4_XS, 256, 8}, {DType::kQ5_0, 32, 2}, {DType::kIQ4_NL, 32, 2}};
  for (const auto& c : kCases) {
    SCOPED_TRACE(dtype_name(c.type));
    EXPECT_TRUE(matmul_q8_takes({.type = c.type, .data = kBytes + c.need, .n_in = c.n_in, .n_out = 1}));
    EXPECT_FALSE(matmul_q8_takes({.type = c.type, .data = kBytes + c.need / 2, .n_in = c.n_in, .n_out = 1}));
    if (c.n_in == 256) {
      EXPECT_FALSE(matmul_q8_takes({.type = c.type, .data = kBytes, .n_in = 288, .n_out = 1}));
    }
  }
  EXPECT_FALSE(matmul_q8_takes({.type = DType::kF16, .data = kBytes, .n_in = 256, .n_out = 1}));
  EXPECT_FALSE(matmul_q8_takes({.type = DType::kBF16, .data = kBytes, .n_in = 256, .n_out = 1}));
}

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
