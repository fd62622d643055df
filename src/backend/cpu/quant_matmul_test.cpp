// Integer-dot-product kernels for quantized weights (quant_rows.h) against a
// double-precision reference on the dequantized weights and the original f32
// activations, at every instruction-set level the machine supports.
//
// Error bounds. The weights enter the reference exactly (dequantize_row), so the
// error is that of rounding the activations to int8 (act_quant.h): per element
// uniform in +-d/2 with d = amax / 127 of its activation block, so a dot product
// is off by a near-Gaussian amount of standard deviation
//   sigma = sqrt(sum_i w_i^2 * d_i^2 / 12),
// which the reference computes per (row, token). Checked two ways:
//   - every output: |y - ref| <= 6 sigma (worst seen over ~2e5 outputs: 4.3);
//   - shapes with >= 64 outputs: nmse < 1e-4 (blocks of 32: Q8_0, Q4_0; worst
//     seen 4.2e-5) or 1.5e-4 (one scale per 256: Q4_K, Q6_K; worst seen 7.6e-5).
// So 8-bit activations give nmse of a few 1e-5 on Gaussian data, not below 1e-5.
// Levels agree far more tightly (1e-10): their activations are byte-identical
// and their integer sums equal, only float summation order differs.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/op_test_util.h"
#include "backend/cpu/repack.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

using testing::GuardedFloats;
using testing::nmse;
using testing::random_floats;

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,   DType::kQ6_K,  DType::kQ4_1, DType::kQ5_0,
                            DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS};
constexpr double kNmseBound32 = 1e-4;    // Q8_0, Q4_0, ...: activation blocks of 32
constexpr double kNmseBound256 = 1.5e-4; // K-quants, IQ4_XS: activation blocks of 256
constexpr double kIsaAgreeBound = 1e-10; // levels differ only in float summation order

// Types on 256-element super-blocks, whose activations are ActQ8x256.
bool is_k_quant(DType t) { return dtype_traits(t).block_size == 256; }
double nmse_bound(DType t) { return is_k_quant(t) ? kNmseBound256 : kNmseBound32; }

std::vector<int64_t> n_ins(DType t) {
  if (is_k_quant(t)) return {256, 512, 2816};
  return {32, 96, 256, 512, 2816};  // one block, an odd block count, several
}

// Weights, activations and the double reference of one (type, n_in) at the
// largest shape; smaller shapes use the leading rows / tokens.
struct Problem {
  DType type;
  int64_t n_in, n_out, n_tok;
  size_t w_row;                 // bytes per weight row
  std::vector<uint8_t> w;       // [n_out, w_row]
  std::vector<float> x;         // [n_tok, n_in]
  std::vector<double> ref;      // [n_tok, n_out]
  // [n_tok, n_out] standard deviation of the error int8 activations cause:
  // sqrt(sum_i w_i^2 * d_i^2 / 12), d_i = (max |x| of i's activation block) / 127.
  std::vector<double> err_sigma;

  Problem(DType t, int64_t in, int64_t out, int64_t tok, uint32_t seed)
      : type(t), n_in(in), n_out(out), n_tok(tok), w_row(row_bytes(t, in)) {
    const auto wf = random_floats(static_cast<size_t>(in * out), seed, 0.05f);
    w.resize(w_row * out);
    quantize_tensor(t, wf.data(), w.data(), out, in);
    x = random_floats(static_cast<size_t>(in * tok), seed + 1);
    const int64_t act_block = is_k_quant(t) ? 256 : 32;
    std::vector<double> step2(static_cast<size_t>(in * tok));  // d_i^2 / 12
    for (int64_t k = 0; k < tok; ++k)
      for (int64_t b = 0; b < in; b += act_block) {
        float amax = 0;
        for (int64_t i = b; i < b + act_block; ++i) amax = std::max(amax, std::fabs(x[k * in + i]));
        for (int64_t i = b; i < b + act_block; ++i) step2[k * in + i] = std::pow(amax / 127.0, 2) / 12;
      }
    std::vector<float> wd(static_cast<size_t>(in));
    ref.resize(static_cast<size_t>(out * tok));
    err_sigma.resize(static_cast<size_t>(out * tok));
    for (int64_t r = 0; r < out; ++r) {
      dequantize_row(t, w.data() + r * w_row, wd.data(), in);
      for (int64_t k = 0; k < tok; ++k) {
        double s = 0, v = 0;
        for (int64_t i = 0; i < in; ++i) {
          s += static_cast<double>(wd[i]) * x[k * in + i];
          v += static_cast<double>(wd[i]) * wd[i] * step2[k * in + i];
        }
        ref[k * out + r] = s;
        err_sigma[k * out + r] = std::sqrt(v);
      }
    }
  }
};

// Converted activations of n_tok tokens at a deliberately unaligned address and
// stride, so kernels may not assume alignment.
struct Acts {
  std::vector<uint8_t> buf;
  size_t stride;
  const uint8_t* data() const { return buf.data() + 4; }
};

Acts convert(const MatmulKernel& k, const float* x, int64_t n_in, int64_t n_tok) {
  Acts a;
  a.stride = k.act_row_bytes(n_in) + 8;
  a.buf.assign(a.stride * n_tok + 4, 0xCD);
  for (int64_t t = 0; t < n_tok; ++t) k.convert_act(x + t * n_in, a.buf.data() + 4 + t * a.stride, n_in);
  return a;
}

// Runs rows() over [r0, r1) into y with row stride y_stride.
void run(const MatmulKernel& k, const Problem& p, const Acts& a, int64_t n_out, int64_t n_tok, float* y,
         int64_t y_stride, int64_t r0, int64_t r1) {
  k.rows(p.w.data(), p.w_row, p.n_in, a.data(), a.stride, n_tok, y, y_stride, r0, r1);
}

TEST(QuantMatmul, EveryTypeHasAKernelAtEveryLevel) {
  for (DType t : kTypes) {
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      const MatmulKernel k = quant_matmul_kernel(t, isa);
      EXPECT_NE(k.rows, nullptr) << dtype_name(t) << " " << isa_name(isa);
      EXPECT_NE(k.convert_act, nullptr);
      EXPECT_NE(k.act_row_bytes, nullptr);
    }
  }
  EXPECT_EQ(quant_matmul_kernel(DType::kF32, Isa::kScalar).rows, nullptr);
}

TEST(QuantMatmul, MatchesDoubleReferenceForEveryShapeAndLevel) {
  const int64_t kOuts[] = {1, 7, 33, 64, 129};
  const int64_t kToks[] = {1, 2, 3, 5, 16, 33};
  uint32_t seed = 100;
  for (DType type : kTypes) {
    double worst = 0, worst_z = 0;
    for (int64_t n_in : n_ins(type)) {
      const Problem p(type, n_in, 129, 33, seed += 7);
      for (Isa isa : testing::supported_isas()) {
        const MatmulKernel k = quant_matmul_kernel(type, isa);
        const Acts a = convert(k, p.x.data(), n_in, 33);
        for (int64_t n_out : kOuts) {
          for (int64_t n_tok : kToks) {
            GuardedFloats y(static_cast<size_t>(n_out * n_tok));
            run(k, p, a, n_out, n_tok, y.data(), n_out, 0, n_out);
            ASSERT_TRUE(y.guards_intact()) << k.name << " n_in " << n_in << " n_out " << n_out;
            std::vector<float> ref(static_cast<size_t>(n_out * n_tok));
            for (int64_t t = 0; t < n_tok; ++t) {
              for (int64_t r = 0; r < n_out; ++r) {
                const size_t at = static_cast<size_t>(t * 129 + r);
                ref[t * n_out + r] = static_cast<float>(p.ref[at]);
                // Every element: within 6 standard deviations of the expected error.
                worst_z = std::max(worst_z, std::fabs(y.data()[t * n_out + r] - p.ref[at]) / p.err_sigma[at]);
                ASSERT_LE(std::fabs(y.data()[t * n_out + r] - p.ref[at]), 6 * p.err_sigma[at] + 1e-6)
                    << k.name << " n_in " << n_in << " n_out " << n_out << " n_tok " << n_tok << " (" << t
                    << ", " << r << ")";
              }
            }
            // In aggregate (enough outputs for the mean square to be stable): nmse.
            if (n_out * n_tok >= 64) {
              const double e = nmse(y.data(), ref.data(), ref.size());
              worst = std::max(worst, e);
              EXPECT_LT(e, nmse_bound(type))
                  << k.name << " n_in " << n_in << " n_out " << n_out << " n_tok " << n_tok;
            }
          }
        }
      }
    }
    std::printf("%-5s worst nmse vs f32 reference: %.3g (bound %.3g); worst |error| / sigma: %.2f (bound 6)\n",
                dtype_name(type), worst, nmse_bound(type), worst_z);
  }
}

TEST(QuantMatmul, OneTokenAloneEqualsTheSameTokenInABatchBitForBit) {
  uint32_t seed = 300;
  for (DType type : kTypes) {
    const int64_t n_in = is_k_quant(type) ? 512 : 288;  // 288: 9 blocks, odd
    const int64_t n_out = 37, n_tok = 33;
    const Problem p(type, n_in, n_out, n_tok, seed += 11);
    for (Isa isa : testing::supported_isas()) {
      const MatmulKernel k = quant_matmul_kernel(type, isa);
      const Acts a = convert(k, p.x.data(), n_in, n_tok);
      std::vector<float> batch(static_cast<size_t>(n_out * n_tok));
      run(k, p, a, n_out, n_tok, batch.data(), n_out, 0, n_out);
      for (int64_t t = 0; t < n_tok; ++t) {
        GuardedFloats one(static_cast<size_t>(n_out));
        k.rows(p.w.data(), p.w_row, n_in, a.data() + t * a.stride, a.stride, 1, one.data(), n_out, 0, n_out);
        ASSERT_TRUE(one.guards_intact());
        for (int64_t r = 0; r < n_out; ++r)
          ASSERT_EQ(std::memcmp(&one.data()[r], &batch[t * n_out + r], 4), 0)
              << k.name << " token " << t << " row " << r;
      }
      // A batch starting at an odd token (other tile positions) gives the same bits.
      std::vector<float> tail(static_cast<size_t>(n_out * (n_tok - 3)));
      k.rows(p.w.data(), p.w_row, n_in, a.data() + 3 * a.stride, a.stride, n_tok - 3, tail.data(), n_out, 0, n_out);
      EXPECT_EQ(std::memcmp(tail.data(), batch.data() + 3 * n_out, tail.size() * 4), 0) << k.name;
    }
  }
}

TEST(QuantMatmul, RowSplitsGiveTheSameBitsAndWriteOnlyTheirRows) {
  uint32_t seed = 500;
  for (DType type : kTypes) {
    const int64_t n_in = is_k_quant(type) ? 256 : 160, n_out = 41, y_stride = 45;
    for (int64_t n_tok : {1, 6}) {
      const Problem p(type, n_in, n_out, n_tok, seed += 13);
      for (Isa isa : testing::supported_isas()) {
        const MatmulKernel k = quant_matmul_kernel(type, isa);
        const Acts a = convert(k, p.x.data(), n_in, n_tok);
        GuardedFloats whole(static_cast<size_t>(y_stride * n_tok));
        run(k, p, a, n_out, n_tok, whole.data(), y_stride, 0, n_out);
        for (const auto& cuts : std::vector<std::vector<int64_t>>{{0, 1, 41}, {0, 5, 6, 19, 41}, {0, 3, 7, 11, 40, 41}}) {
          GuardedFloats split(static_cast<size_t>(y_stride * n_tok));
          for (size_t c = 0; c + 1 < cuts.size(); ++c) {
            run(k, p, a, n_out, n_tok, split.data(), y_stride, cuts[c], cuts[c + 1]);
            // Rows past this range are still the NaN poison.
            for (int64_t t = 0; t < n_tok; ++t)
              for (int64_t r = cuts[c + 1]; r < y_stride; ++r) ASSERT_TRUE(std::isnan(split.data()[t * y_stride + r]));
          }
          ASSERT_TRUE(split.guards_intact()) << k.name;
          for (int64_t t = 0; t < n_tok; ++t)
            ASSERT_EQ(std::memcmp(split.data() + t * y_stride, whole.data() + t * y_stride, n_out * 4), 0)
                << k.name << " n_tok " << n_tok;
        }
      }
    }
  }
}

TEST(QuantMatmul, LevelsAgreeAndWriteIdenticalActivations) {
  uint32_t seed = 700;
  for (DType type : kTypes) {
    const int64_t n_in = is_k_quant(type) ? 2816 : 2848, n_out = 29, n_tok = 7;  // 2848: 89 blocks
    const Problem p(type, n_in, n_out, n_tok, seed += 17);
    const MatmulKernel ks = quant_matmul_kernel(type, Isa::kScalar);
    const Acts as = convert(ks, p.x.data(), n_in, n_tok);
    std::vector<float> ys(static_cast<size_t>(n_out * n_tok));
    run(ks, p, as, n_out, n_tok, ys.data(), n_out, 0, n_out);
    for (Isa isa : testing::supported_isas()) {
      const MatmulKernel k = quant_matmul_kernel(type, isa);
      const Acts a = convert(k, p.x.data(), n_in, n_tok);
      EXPECT_EQ(a.buf, as.buf) << k.name << ": activations differ from the scalar ones";
      GuardedFloats y(static_cast<size_t>(n_out * n_tok));
      run(k, p, a, n_out, n_tok, y.data(), n_out, 0, n_out);
      EXPECT_LT(nmse(y.data(), ys.data(), ys.size()), kIsaAgreeBound) << k.name;
    }
  }
}

// The repacked kernels compute the same integer sums and float operations per
// (row, token) as the GGUF-row kernel of their level, so they must give the same
// bits for every token count, tile position and row split (which is what lets
// resident repacked weights and streamed GGUF weights produce identical tokens).
// The layout is the one each level repacks to (AVX2: x8; AVX-512: Q4_0x4, Q8_0x16).
TEST(QuantMatmul, RepackedLayoutsEqualGgufRowsBitForBitAtEveryLevel) {
  const int64_t kToks[] = {1, 2, 3, 4, 5, 8, 9, 16, 33};
  uint32_t seed = 1300;
  for (DType type : {DType::kQ4_0, DType::kQ8_0})
  for (int64_t n_in : {64, 192, 2816}) {
    const int64_t n_out = 48, y_stride = 51;
    const Problem p(type, n_in, n_out, 33, seed += 3);
    for (Isa isa : testing::supported_isas()) {
      // The scalar level does not repack; its kernels for the AVX2 layouts are checked too.
      const WeightLayout layout = repack_layout(type, n_out, n_in, isa == Isa::kScalar ? Isa::kAvx2 : isa);
      ASSERT_NE(layout, WeightLayout::kRows);
      std::vector<uint8_t> packed(p.w.size());
      repack_rows(layout, p.w.data(), packed.data(), n_in, 0, n_out);
      const MatmulKernel rows = quant_matmul_kernel(type, isa);
      const MatmulKernel xk = quant_matmul_kernel(type, isa, layout);
      ASSERT_NE(xk.rows, nullptr);
      EXPECT_EQ(xk.act_row_bytes, rows.act_row_bytes);
      const Acts a = convert(xk, p.x.data(), n_in, 33);
      for (int64_t n_tok : kToks) {
        GuardedFloats want(static_cast<size_t>(y_stride * n_tok)), got(static_cast<size_t>(y_stride * n_tok));
        rows.rows(p.w.data(), p.w_row, n_in, a.data(), a.stride, n_tok, want.data(), y_stride, 0, n_out);
        // Split at group boundaries, as matmul_group does.
        for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 16}, {16, 32}, {32, 48}}) {
          xk.rows(packed.data(), p.w_row, n_in, a.data(), a.stride, n_tok, got.data(), y_stride, r0, r1);
          for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t r = r1; r < y_stride; ++r) ASSERT_TRUE(std::isnan(got.data()[t * y_stride + r])) << xk.name;
        }
        ASSERT_TRUE(got.guards_intact()) << xk.name;
        for (int64_t t = 0; t < n_tok; ++t)
          ASSERT_EQ(std::memcmp(got.data() + t * y_stride, want.data() + t * y_stride, n_out * 4), 0)
              << xk.name << " n_in " << n_in << " n_tok " << n_tok << " token " << t;
      }
      // And against the double reference, as every kernel.
      std::vector<float> y(static_cast<size_t>(n_out * 33)), ref(y.size());
      xk.rows(packed.data(), p.w_row, n_in, a.data(), a.stride, 33, y.data(), n_out, 0, n_out);
      for (int64_t t = 0; t < 33; ++t)
        for (int64_t r = 0; r < n_out; ++r) ref[t * n_out + r] = static_cast<float>(p.ref[t * n_out + r]);
      EXPECT_LT(nmse(y.data(), ref.data(), ref.size()), kNmseBound32) << xk.name;
    }
  }
}

// The scalar kernel of the x16 layout (the reference it falls back to) gives the
// bits of the scalar kernel on GGUF rows.
TEST(QuantMatmul, Q8_0x16ScalarKernelEqualsScalarRows) {
  const int64_t n_in = 288, n_out = 32, n_tok = 5;
  const Problem p(DType::kQ8_0, n_in, n_out, n_tok, 1400);
  std::vector<uint8_t> packed(p.w.size());
  repack_q8_0x16(p.w.data(), packed.data(), n_in, 0, n_out);
  const MatmulKernel rows = quant_matmul_kernel(DType::kQ8_0, Isa::kScalar);
  const MatmulKernel xk = quant_matmul_kernel(DType::kQ8_0, Isa::kScalar, WeightLayout::kQ8_0x16);
  ASSERT_NE(xk.rows, nullptr);
  const Acts a = convert(xk, p.x.data(), n_in, n_tok);
  std::vector<float> want(n_out * n_tok), got(n_out * n_tok);
  rows.rows(p.w.data(), p.w_row, n_in, a.data(), a.stride, n_tok, want.data(), n_out, 0, n_out);
  xk.rows(packed.data(), p.w_row, n_in, a.data(), a.stride, n_tok, got.data(), n_out, 16, 32);
  xk.rows(packed.data(), p.w_row, n_in, a.data(), a.stride, n_tok, got.data(), n_out, 0, 16);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
  // No AVX2 kernel of its own: the lookup falls back to the scalar one.
  EXPECT_EQ(quant_matmul_kernel(DType::kQ8_0, Isa::kAvx2, WeightLayout::kQ8_0x16).rows, nullptr);
  EXPECT_NE(matmul_kernel(DType::kQ8_0, Isa::kAvx2, WeightLayout::kQ8_0x16).rows, nullptr);
}

TEST(QuantMatmul, DISABLED_Throughput) {
  const Isa isa = active_isa();
  struct Shape { int64_t n_out, n_in; };
  for (DType type : kTypes) {
    for (Shape s : {Shape{4096, 4096}, Shape{2048, 5632}, Shape{768, 768}}) {
      const size_t w_row = row_bytes(type, s.n_in), w_bytes = w_row * s.n_out;
      const int n_copies = static_cast<int>(std::max<size_t>(2, (256u << 20) / w_bytes));
      std::vector<uint8_t> gguf(w_bytes);
      {
        const auto wf = random_floats(static_cast<size_t>(s.n_in * s.n_out), 1, 0.05f);
        quantize_tensor(type, wf.data(), gguf.data(), s.n_out, s.n_in);
      }
      const WeightLayout packed = repack_layout(type, s.n_out, s.n_in, isa);
      for (WeightLayout layout : {WeightLayout::kRows, packed}) {
        const MatmulKernel& k = matmul_kernel(type, isa, layout);
        std::vector<uint8_t> w(w_bytes * n_copies);
        if (layout == WeightLayout::kRows) std::memcpy(w.data(), gguf.data(), w_bytes);
        else repack_rows(layout, gguf.data(), w.data(), s.n_in, 0, s.n_out);
        for (int c = 1; c < n_copies; ++c) std::memcpy(w.data() + c * w_bytes, w.data(), w_bytes);
        const int64_t max_tok = 256;
        const auto x = random_floats(static_cast<size_t>(s.n_in * max_tok), 2);
        const size_t stride = k.act_row_bytes(s.n_in);
        std::vector<uint8_t> act(stride * max_tok);
        const double c0 = testing::thread_cpu_seconds();
        for (int64_t t = 0; t < max_tok; ++t) k.convert_act(x.data() + t * s.n_in, act.data() + t * stride, s.n_in);
        const double convert_us = (testing::thread_cpu_seconds() - c0) / max_tok * 1e6;
        std::vector<float> y(static_cast<size_t>(s.n_out * max_tok));
        // GEMV: median of several passes over all copies.
        std::vector<double> gbs;
        for (int pass = 0; pass < 7; ++pass) {
          const double t0 = testing::thread_cpu_seconds();
          for (int c = 0; c < n_copies; ++c)
            k.rows(w.data() + c * w_bytes, w_row, s.n_in, act.data(), stride, 1, y.data(), s.n_out, 0, s.n_out);
          gbs.push_back(static_cast<double>(w_bytes) * n_copies / (testing::thread_cpu_seconds() - t0) / 1e9);
        }
        std::sort(gbs.begin(), gbs.end());
        std::printf("%-22s %5lld x %-5lld GEMV %6.1f GB/s (median of 7; min %.1f max %.1f)  convert_act %.1f us/token\n",
                    k.name, static_cast<long long>(s.n_out), static_cast<long long>(s.n_in), gbs[3], gbs[0], gbs[6],
                    convert_us);
        for (int64_t n_tok : {16, 64, 256}) {
          std::vector<double> gf;
          for (int pass = 0; pass < 5; ++pass) {
            const double t0 = testing::thread_cpu_seconds();
            k.rows(w.data(), w_row, s.n_in, act.data(), stride, n_tok, y.data(), s.n_out, 0, s.n_out);
            gf.push_back(2.0 * s.n_out * s.n_in * n_tok / (testing::thread_cpu_seconds() - t0) / 1e9);
          }
          std::sort(gf.begin(), gf.end());
          std::printf("%-22s %5lld x %-5lld GEMM n_tok %3lld: %6.1f GFLOP/s (median of 5)\n", k.name,
                      static_cast<long long>(s.n_out), static_cast<long long>(s.n_in), static_cast<long long>(n_tok),
                      gf[2]);
        }
        if (packed == WeightLayout::kRows) break;
      }
    }
  }
}

// matmul_group with prepare: every row of x is prepared exactly once, before
// it is converted, and y has the bits of preparing everything first. Two
// weight types (two activation formats) in one dispatch, 2 threads, token
// counts below and above the parallel-conversion threshold.
TEST(MatmulGroup, PrepareRunsOncePerRowBeforeConversion) {
  const Isa isa = active_isa();
  ThreadPool pool(2);
  const int64_t n_in = 256, n_q8 = 64, n_f16 = 48;
  std::vector<uint8_t> wq(row_bytes(DType::kQ8_0, n_in) * n_q8), wh(row_bytes(DType::kF16, n_in) * n_f16);
  {
    const auto a = random_floats(static_cast<size_t>(n_in * n_q8), 3, 0.1f);
    const auto b = random_floats(static_cast<size_t>(n_in * n_f16), 4, 0.1f);
    quantize_tensor(DType::kQ8_0, a.data(), wq.data(), n_q8, n_in);
    quantize_tensor(DType::kF16, b.data(), wh.data(), n_f16, n_in);
  }
  const WeightLayout lq = repack_layout(DType::kQ8_0, n_q8, n_in, isa);
  std::vector<uint8_t> wq_packed(wq.size());
  if (lq == WeightLayout::kRows) wq_packed = wq;
  else repack_rows(lq, wq.data(), wq_packed.data(), n_in, 0, n_q8);
  for (int64_t n_tok : {1, 3, 4, 17}) {
    const auto src = random_floats(static_cast<size_t>(n_in * n_tok), 5);
    std::vector<float> x(src.size()), y1q(static_cast<size_t>(n_q8 * n_tok)), y1h(static_cast<size_t>(n_f16 * n_tok));
    std::vector<float> y2q(y1q.size()), y2h(y1h.size());
    std::vector<uint8_t> scratch(matmul_scratch_bytes(n_tok, n_in));
    auto jobs = [&](float* yq, float* yh) {
      return std::vector<MatmulJob>{
          {WeightView{.type = DType::kQ8_0, .data = wq_packed.data(), .n_in = n_in, .n_out = n_q8, .layout = lq}, yq},
          {WeightView{.type = DType::kF16, .data = wh.data(), .n_in = n_in, .n_out = n_f16}, yh}};
    };
    // Prepared first, then multiplied.
    for (size_t i = 0; i < src.size(); ++i) x[i] = 2.0f * src[i] - 1.0f;
    const auto j1 = jobs(y1q.data(), y1h.data());
    matmul_group(j1, x.data(), n_in, n_tok, scratch.data(), pool, isa);
    // Prepared inside the dispatch.
    std::fill(x.begin(), x.end(), std::nanf(""));
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n_tok));
    const auto j2 = jobs(y2q.data(), y2h.data());
    matmul_group(j2, x.data(), n_in, n_tok, scratch.data(), pool, isa, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        calls[static_cast<size_t>(t)].fetch_add(1);
        for (int64_t i = 0; i < n_in; ++i) x[t * n_in + i] = 2.0f * src[t * n_in + i] - 1.0f;
      }
    });
    for (int64_t t = 0; t < n_tok; ++t) EXPECT_EQ(calls[static_cast<size_t>(t)].load(), 1) << "n_tok " << n_tok;
    EXPECT_EQ(0, std::memcmp(y1q.data(), y2q.data(), y1q.size() * 4)) << "n_tok " << n_tok;
    EXPECT_EQ(0, std::memcmp(y1h.data(), y2h.data(), y1h.size() * 4)) << "n_tok " << n_tok;
  }
}

// The matmuls of a 16-sequence decode step of the 110m shape (Q8_0, repacked
// as the engine does) through matmul_group on 2 threads, with the weights
// coming from memory (copies filling 256 MiB, on huge pages, used in turn) and
// from cache (one copy again and again). Prints GOP/s and the weight GB/s.
TEST(QuantMatmul, DISABLED_StepFromMemory) {
  const Isa isa = active_isa();
  ThreadPool pool(2);
  struct Shape { const char* name; int64_t n_out, n_in; };
  const int64_t n_tok = 16;
  for (Shape s : {Shape{"q/k/v", 2304, 768}, Shape{"o", 768, 768}, Shape{"gate+up", 4096, 768},
                  Shape{"down", 768, 2048}, Shape{"output", 32000, 768}}) {
    const size_t w_row = row_bytes(DType::kQ8_0, s.n_in), w_bytes = w_row * s.n_out;
    const int n_copies = static_cast<int>(std::max<size_t>(2, (256u << 20) / w_bytes));
    std::vector<uint8_t> gguf(w_bytes);
    {
      const auto wf = random_floats(static_cast<size_t>(s.n_in * s.n_out), 1, 0.05f);
      quantize_tensor(DType::kQ8_0, wf.data(), gguf.data(), s.n_out, s.n_in);
    }
    const WeightLayout layout = repack_layout(DType::kQ8_0, s.n_out, s.n_in, isa);
    HugeBuffer w(w_bytes * static_cast<size_t>(n_copies));
    for (int c = 0; c < n_copies; ++c) {
      uint8_t* dst = w.data() + static_cast<size_t>(c) * w_bytes;
      if (layout == WeightLayout::kRows) std::memcpy(dst, gguf.data(), w_bytes);
      else repack_rows(layout, gguf.data(), dst, s.n_in, 0, s.n_out);
    }
    const auto x = random_floats(static_cast<size_t>(s.n_in * n_tok), 2);
    std::vector<float> y(static_cast<size_t>(s.n_out * n_tok));
    std::vector<uint8_t> scratch(matmul_scratch_bytes(n_tok, s.n_in));
    auto run = [&](int c) {
      const MatmulJob job{WeightView{.type = DType::kQ8_0, .data = w.data() + static_cast<size_t>(c) * w_bytes,
                                     .n_in = s.n_in, .n_out = s.n_out, .layout = layout},
                          y.data()};
      matmul_group(std::span(&job, 1), x.data(), s.n_in, n_tok, scratch.data(), pool, isa);
    };
    double med[2];
    for (int hot = 0; hot < 2; ++hot) {
      std::vector<double> gop;
      for (int pass = 0; pass < 7; ++pass) {
        const double t0 = testing::thread_cpu_seconds();
        for (int c = 0; c < n_copies; ++c) run(hot ? 0 : c);
        gop.push_back(2.0 * s.n_out * s.n_in * n_tok * n_copies / (testing::thread_cpu_seconds() - t0) / 1e9);
      }
      std::sort(gop.begin(), gop.end());
      med[hot] = gop[3];
    }
    std::printf("%-8s %5lld x %-5lld x %lld tokens, %s, 2 threads: from memory %6.1f GOP/s (%4.1f GB/s of weights), "
                "from cache %6.1f GOP/s (medians of 7)\n",
                s.name, static_cast<long long>(s.n_out), static_cast<long long>(s.n_in), static_cast<long long>(n_tok),
                matmul_kernel(DType::kQ8_0, isa, layout).name, med[0],
                med[0] / (2.0 * n_tok) * static_cast<double>(w_row) / static_cast<double>(s.n_in), med[1]);
  }
}

}  // namespace
}  // namespace sluice::cpu
