// The scalar reference operators against naive double-precision formulations.
#include "backend/reference_ops.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/op_test_util.h"
#include "quant/quant.h"

namespace sluice::ref {
namespace {

using cpu::testing::random_floats;

TEST(RefOps, DotMatchesDoubleForOddLengths) {
  for (int64_t n : {1, 7, 8, 9, 63, 64, 65, 1000}) {
    auto a = random_floats(static_cast<size_t>(n), 1), b = random_floats(static_cast<size_t>(n), 2);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(dot_f32(a.data(), b.data(), n), ref, 1e-4 * std::sqrt(static_cast<double>(n))) << n;
  }
}

TEST(RefOps, MatmulMatchesNaiveForEveryTypeAndIsBatchInvariant) {
  ThreadPool pool(3);
  const int64_t n_in = 256, n_out = 37, n_tok = 5;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    auto wf = random_floats(static_cast<size_t>(n_in * n_out), 3, 0.1f);
    std::vector<uint8_t> wq(row_bytes(type, n_in) * n_out);
    for (int64_t r = 0; r < n_out; ++r)
      quantize_row(type, wf.data() + r * n_in, wq.data() + r * row_bytes(type, n_in), n_in);
    // The reference uses the dequantized weights, so only rounding of the dot differs.
    std::vector<float> wd(static_cast<size_t>(n_in * n_out));
    for (int64_t r = 0; r < n_out; ++r) dequantize_row(type, wq.data() + r * row_bytes(type, n_in), wd.data() + r * n_in, n_in);
    auto x = random_floats(static_cast<size_t>(n_in * n_tok), 4);
    std::vector<float> y(static_cast<size_t>(n_out * n_tok), NAN), scratch(static_cast<size_t>(pool.n_threads() * n_in));
    WeightView w{.type = type, .data = wq.data(), .n_in = n_in, .n_out = n_out};
    matmul(w, x.data(), y.data(), n_tok, scratch.data(), pool);
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < n_out; ++r) {
        double ref = 0;
        for (int64_t i = 0; i < n_in; ++i) ref += static_cast<double>(wd[r * n_in + i]) * x[t * n_in + i];
        EXPECT_NEAR(y[t * n_out + r], ref, 1e-4) << dtype_name(type);
      }
      // One token alone gives the identical bits.
      std::vector<float> y1(static_cast<size_t>(n_out));
      matmul(w, x.data() + t * n_in, y1.data(), 1, scratch.data(), pool);
      for (int64_t r = 0; r < n_out; ++r) EXPECT_EQ(y1[r], y[t * n_out + r]);
    }
  }
}

TEST(RefOps, RmsNorm) {
  auto x = random_floats(3 * 10, 5);
  auto w = random_floats(10, 6);
  std::vector<float> out(30);
  rmsnorm(x.data(), w.data(), out.data(), 3, 10, 1e-5f);
  for (int t = 0; t < 3; ++t) {
    double ss = 0;
    for (int i = 0; i < 10; ++i) ss += x[t * 10 + i] * x[t * 10 + i];
    const double inv = 1.0 / std::sqrt(ss / 10 + 1e-5);
    for (int i = 0; i < 10; ++i) EXPECT_NEAR(out[t * 10 + i], x[t * 10 + i] * inv * w[i], 1e-5);
  }
}

TEST(RefOps, RopeLayoutsRotateTheRightPairs) {
  // head_dim 6, n_rot 4: dims 4..5 untouched. Pair p turns by (cos, sin) =
  // cs[2p], cs[2p + 1]; its dims are (2p, 2p + 1) adjacent, (p, p + 2) NeoX.
  const float cs[4] = {std::cos(0.5f), std::sin(0.5f), std::cos(0.25f), std::sin(0.25f)};
  struct Case {
    RopeLayout layout;
    int pairs[2][2];  // [pair][first, second dim]
  };
  for (const Case& c : {Case{RopeLayout::kAdjacent, {{0, 1}, {2, 3}}}, Case{RopeLayout::kNeox, {{0, 2}, {1, 3}}}}) {
    const std::vector<float> in = {1, 2, 3, 4, 5, 6};
    std::vector<float> x = in;
    rope(x.data(), 1, 6, 4, cs, c.layout);
    for (int p = 0; p < 2; ++p) {
      const int i = c.pairs[p][0], j = c.pairs[p][1];
      EXPECT_NEAR(x[i], in[i] * cs[2 * p] - in[j] * cs[2 * p + 1], 1e-6) << "dim " << i;
      EXPECT_NEAR(x[j], in[i] * cs[2 * p + 1] + in[j] * cs[2 * p], 1e-6) << "dim " << j;
    }
    EXPECT_EQ(x[4], 5);
    EXPECT_EQ(x[5], 6);
  }
}

TEST(RefOps, GeluTanhKnownValues) {
  // Values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in double precision.
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411919906, 1e-6);
  EXPECT_NEAR(gelu_tanh(-1.0f), -0.1588080094, 1e-6);
  EXPECT_NEAR(gelu_tanh(2.5f), 2.4849157339, 1e-5);
  EXPECT_NEAR(gelu_tanh(-30.0f), 0.0f, 1e-12);
  const float g[3] = {1.0f, -1.0f, 0.5f}, u[3] = {2.0f, 3.0f, -1.0f};
  float o[3];
  geglu(g, u, o, 3);
  EXPECT_NEAR(o[0], 2 * 0.8411919906, 1e-6);
  EXPECT_NEAR(o[1], 3 * -0.1588080094, 1e-6);
  EXPECT_NEAR(o[2], -0.3457140098, 1e-6);
}

TEST(RefOps, SwiGlu) {
  const float g[3] = {-2, 0, 3}, u[3] = {1, 5, -2};
  float o[3];
  swiglu(g, u, o, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(o[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

TEST(RefOps, AttentionMatchesNaiveSoftmaxWithGqaAndOffset) {
  ThreadPool pool(2);
  const int64_t n_head = 4, n_kv = 2, hd = 8, pos0 = 5, n_tok = 3, n_ctx = pos0 + n_tok;
  auto q = random_floats(static_cast<size_t>(n_tok * n_head * hd), 7);
  auto k = random_floats(static_cast<size_t>(n_ctx * n_kv * hd), 8);
  auto v = random_floats(static_cast<size_t>(n_ctx * n_kv * hd), 9);
  std::vector<float> out(q.size(), NAN), scratch(static_cast<size_t>(pool.n_threads() * hd));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attention(AttentionArgs{.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data(), .n_tokens = n_tok,
                          .pos0 = pos0, .n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .scale = scale},
            scratch.data(), pool);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t kvh = h / (n_head / n_kv);
      std::vector<double> s;
      double mx = -1e300;
      for (int64_t j = 0; j <= pos0 + t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += q[(t * n_head + h) * hd + i] * k[(j * n_kv + kvh) * hd + i];
        s.push_back(d * scale);
        mx = std::max(mx, s.back());
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (size_t j = 0; j < s.size(); ++j) o += s[j] / sum * v[(j * n_kv + kvh) * hd + i];
        EXPECT_NEAR(out[(t * n_head + h) * hd + i], o, 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace sluice::ref
