// Float-weight matmul kernels (F32, F16, BF16) at every instruction-set level
// the CPU has, against a double-precision reference over the dequantized
// weights, with guarded outputs, and bit-identity across n_tok and row splits.
#include "backend/cpu/float_matmul.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/op_test_util.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

using testing::GuardedFloats;
using testing::nmse;
using testing::random_floats;

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// A quantized weight matrix, its dequantized floats and converted activations.
struct Problem {
  int64_t n_in = 0, n_out = 0, n_tok = 0;
  size_t w_row_bytes = 0;
  std::vector<uint8_t> w;   // [n_out, w_row_bytes]
  std::vector<float> wd;    // [n_out, n_in] dequantized
  std::vector<float> x;     // [n_tok, n_in]
  size_t xa_stride = 0;
  std::vector<uint8_t> xa;  // [n_tok, xa_stride]
};

Problem make_problem(const MatmulKernel& k, DType type, int64_t n_in, int64_t n_out, int64_t n_tok, uint32_t seed,
                     float w_scale = 1.0f) {
  Problem p{.n_in = n_in, .n_out = n_out, .n_tok = n_tok};
  p.w_row_bytes = row_bytes(type, n_in);
  const auto wf = random_floats(static_cast<size_t>(n_in * n_out), seed, w_scale);
  p.w.resize(p.w_row_bytes * static_cast<size_t>(n_out));
  quantize_tensor(type, wf.data(), p.w.data(), n_out, n_in);
  p.wd.resize(wf.size());
  for (int64_t r = 0; r < n_out; ++r)
    dequantize_row(type, p.w.data() + r * p.w_row_bytes, p.wd.data() + r * n_in, n_in);
  p.x = random_floats(static_cast<size_t>(n_in * n_tok), seed + 1);
  // An odd-ish stride (not a multiple of 64 bytes) checks that kernels use it.
  p.xa_stride = k.act_row_bytes(n_in) + 36;
  p.xa.assign(p.xa_stride * static_cast<size_t>(n_tok), 0xEE);
  for (int64_t t = 0; t < n_tok; ++t) k.convert_act(p.x.data() + t * n_in, p.xa.data() + t * p.xa_stride, n_in);
  return p;
}

// y[t][r] in double over the dequantized weights and the f32 activations.
std::vector<double> reference(const Problem& p) {
  std::vector<double> ref(static_cast<size_t>(p.n_tok * p.n_out));
  for (int64_t t = 0; t < p.n_tok; ++t)
    for (int64_t r = 0; r < p.n_out; ++r) {
      double s = 0;
      for (int64_t i = 0; i < p.n_in; ++i) s += static_cast<double>(p.wd[r * p.n_in + i]) * p.x[t * p.n_in + i];
      ref[t * p.n_out + r] = s;
    }
  return ref;
}

// Runs rows() for tokens [0, n_tok) and row ranges split at `cuts`, into a
// guarded y with row stride n_out + 3; returns y compacted to [n_tok, n_out].
std::vector<float> run(const MatmulKernel& k, const Problem& p, int64_t n_tok, const std::vector<int64_t>& cuts,
                       bool* ok) {
  const int64_t y_stride = p.n_out + 3;
  GuardedFloats y(static_cast<size_t>(n_tok * y_stride));
  int64_t r0 = 0;
  for (size_t c = 0; c <= cuts.size(); ++c) {
    const int64_t r1 = c < cuts.size() ? cuts[c] : p.n_out;
    k.rows(p.w.data(), p.w_row_bytes, p.n_in, p.xa.data(), p.xa_stride, n_tok, y.data(), y_stride, r0, r1);
    r0 = r1;
  }
  *ok = y.guards_intact();
  std::vector<float> out(static_cast<size_t>(n_tok * p.n_out));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < p.n_out; ++r) out[t * p.n_out + r] = y.data()[t * y_stride + r];
    for (int64_t r = p.n_out; r < y_stride; ++r)  // padding between rows stays poisoned
      if (!std::isnan(y.data()[t * y_stride + r])) *ok = false;
  }
  return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Every step-th token alone, from its own activation row: the bits `full`
// (run() over all p.n_tok tokens) has for it.
void expect_tokens_alone_keep_the_bits(const MatmulKernel& k, const Problem& p, const std::vector<float>& full,
                                       int64_t step) {
  for (int64_t t = 0; t < p.n_tok; t += step) {
    GuardedFloats y1(static_cast<size_t>(p.n_out));
    k.rows(p.w.data(), p.w_row_bytes, p.n_in, p.xa.data() + t * p.xa_stride, p.xa_stride, 1, y1.data(), p.n_out, 0,
           p.n_out);
    ASSERT_TRUE(y1.guards_intact());
    EXPECT_TRUE(same_bits(y1.data(), full.data() + t * p.n_out, static_cast<size_t>(p.n_out))) << "token " << t;
  }
}

// Normalized-error bound of a kernel against the double reference.
double nmse_bound(const MatmulKernel& k) {
  // bf16 activations: each x rounded with relative error <= 2^-9 (about 2^-9/sqrt(3)
  // rms), so nmse ~ 1.3e-6; 2e-5 leaves room for short rows with few terms.
  if (std::strstr(k.name, "avx512-bf16")) return 2e-5;
  return 1e-10;  // f32 activations: only f32 rounding of the sums
}

TEST(FloatMatmul, EveryTypeAndIsaMatchesDoubleReferenceAndIsBitStable) {
  const std::vector<int64_t> n_ins = {1, 7, 16, 31, 64, 100, 1000};
  const std::vector<int64_t> n_outs = {1, 3, 17, 64, 129};
  const std::vector<int64_t> n_toks = {1, 2, 3, 5, 16, 33};
  std::mt19937 rng(7);
  for (int level = 0; level <= static_cast<int>(max_supported_isa()); ++level) {
    for (DType type : kTypes) {
      const MatmulKernel k = float_matmul_kernel(type, static_cast<Isa>(level));
      ASSERT_NE(k.rows, nullptr) << dtype_name(type) << " " << level;
      const double bound = nmse_bound(k);
      for (int64_t n_in : n_ins) {
        for (int64_t n_out : n_outs) {
          SCOPED_TRACE(::testing::Message() << k.name << " n_in=" << n_in << " n_out=" << n_out);
          const Problem p = make_problem(k, type, n_in, n_out, 33, static_cast<uint32_t>(n_in * 131 + n_out));
          const auto ref = reference(p);
          bool ok = true;
          const auto full = run(k, p, 33, {}, &ok);
          ASSERT_TRUE(ok) << "guard or row padding overwritten";
          std::vector<float> reff(ref.begin(), ref.end());
          EXPECT_LT(nmse(full.data(), reff.data(), full.size()), bound);
          for (int64_t n_tok : n_toks) {
            // Prefix of n_tok tokens: same bits as inside the 33-token batch.
            const auto part = run(k, p, n_tok, {}, &ok);
            ASSERT_TRUE(ok) << "n_tok=" << n_tok;
            EXPECT_TRUE(same_bits(part.data(), full.data(), part.size())) << "n_tok=" << n_tok;
            // Random row splits (two cuts, possibly empty ranges).
            std::uniform_int_distribution<int64_t> cut(0, n_out);
            int64_t a = cut(rng), b = cut(rng);
            if (a > b) std::swap(a, b);
            const auto split = run(k, p, n_tok, {a, b}, &ok);
            ASSERT_TRUE(ok) << "split " << a << " " << b;
            EXPECT_TRUE(same_bits(split.data(), full.data(), split.size())) << "n_tok=" << n_tok << " cuts " << a << "," << b;
          }
          ASSERT_NO_FATAL_FAILURE(expect_tokens_alone_keep_the_bits(k, p, full, 7));
        }
      }
    }
  }
}

// Long rows take other paths: the GEMV tiles several rows at once from n_in =
// 1024 (AVX2), and a batch is cut into token blocks (at least 48 tokens each at
// AVX2), so 100 tokens of 1100 or 4000 elements cross block boundaries; at
// AVX-512 a block's activations are packed unless one tile of 6 tokens is more
// than the level's stack buffer holds (22000 elements). Every token alone and
// every prefix give the bits of the whole batch.
TEST(FloatMatmul, LongRowsAndManyTokensKeepTheBits) {
  for (int level = 0; level <= static_cast<int>(max_supported_isa()); ++level) {
    for (DType type : kTypes) {
      const MatmulKernel k = float_matmul_kernel(type, static_cast<Isa>(level));
      for (int64_t n_in : {1100, 4000, 22000}) {
        SCOPED_TRACE(::testing::Message() << k.name << " n_in=" << n_in);
        const int64_t n_out = 13, n_tok = 100;
        const Problem p = make_problem(k, type, n_in, n_out, n_tok, static_cast<uint32_t>(n_in + 17));
        bool ok = true;
        const auto full = run(k, p, n_tok, {}, &ok);
        ASSERT_TRUE(ok);
        const auto ref = reference(p);
        std::vector<float> reff(ref.begin(), ref.end());
        EXPECT_LT(nmse(full.data(), reff.data(), full.size()), nmse_bound(k));
        for (int64_t part : {49, 97}) {
          const auto y = run(k, p, part, {5}, &ok);
          ASSERT_TRUE(ok);
          EXPECT_TRUE(same_bits(y.data(), full.data(), y.size())) << "n_tok=" << part;
        }
        ASSERT_NO_FATAL_FAILURE(expect_tokens_alone_keep_the_bits(k, p, full, 11));
      }
    }
  }
}

TEST(FloatMatmul, ScalarKernelIsBitIdenticalToDotRow) {
  for (DType type : kTypes) {
    const MatmulKernel k = float_matmul_kernel(type, Isa::kScalar);
    for (int64_t n_in : {1, 31, 33, 100, 1000}) {
      const Problem p = make_problem(k, type, n_in, 5, 6, 11);
      bool ok = true;
      const auto y = run(k, p, 6, {2}, &ok);
      ASSERT_TRUE(ok);
      for (int64_t t = 0; t < 6; ++t)
        for (int64_t r = 0; r < 5; ++r) {
          const float d = dot_row(type, p.w.data() + r * p.w_row_bytes, p.x.data() + t * n_in, n_in);
          EXPECT_TRUE(same_bits(&y[t * 5 + r], &d, 1)) << dtype_name(type) << " n_in=" << n_in;
        }
    }
  }
}

// The F32 path feeds the logits: at model shapes, its error against float64 must
// stay orders of magnitude below the 1e-4 the golden logits test allows.
TEST(FloatMatmul, F32ErrorAtModelShapesIsTiny) {
  for (int level = 0; level <= static_cast<int>(max_supported_isa()); ++level) {
    const MatmulKernel k = float_matmul_kernel(DType::kF32, static_cast<Isa>(level));
    for (int64_t n_in : {288, 4096, 11008}) {
      // Weights ~ N(0, 1/n_in) and unit activations: outputs ~ N(0, 1), like logits
      // before scaling; a model's logits (|y| up to ~30) see proportionally more.
      const Problem p = make_problem(k, DType::kF32, n_in, 16, 4, 3, 1.0f / std::sqrt(static_cast<float>(n_in)));
      const auto ref = reference(p);
      bool ok = true;
      const auto y = run(k, p, 4, {}, &ok);
      ASSERT_TRUE(ok);
      double max_err = 0;
      for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::abs(y[i] - ref[i]));
      EXPECT_LT(max_err, 2e-6) << k.name << " n_in=" << n_in;
    }
  }
}

TEST(FloatMatmul, KernelTableNamesAndBf16Rule) {
  for (int level = 0; level <= 2; ++level) {
    for (DType type : kTypes) {
      const MatmulKernel k = float_matmul_kernel(type, static_cast<Isa>(level));
      ASSERT_NE(k.rows, nullptr);
      EXPECT_NE(std::strstr(k.name, dtype_name(type)), nullptr) << k.name;
      EXPECT_NE(std::strstr(k.name, isa_name(static_cast<Isa>(level))), nullptr) << k.name;
      if (std::strstr(k.name, "avx512-bf16")) {
        EXPECT_TRUE(cpu_features().avx512_bf16);
      }
    }
  }
  EXPECT_EQ(float_matmul_kernel(DType::kQ8_0, Isa::kScalar).rows, nullptr);
  // matmul_scratch_bytes() budgets n_in * 4 + 64 bytes per activation row.
  for (int64_t n_in : {1, 15, 16, 17, 100, 4096}) {
    EXPECT_LE(float_act_row_bytes_f32(n_in), static_cast<size_t>(n_in * 4 + 64));
    EXPECT_LE(float_act_row_bytes_bf16(n_in), static_cast<size_t>(n_in * 4 + 64));
  }
}

// CPU time of the calling thread: unlike wall time, not inflated while other
// processes hold the core (the build machine is shared).
double thread_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Throughput figures (run with --gtest_also_run_disabled_tests): single-thread
// GEMV GB/s over 64 MiB of weights (twice L3), and GEMM GFLOP/s at 64 tokens.
// Medians of 7 runs of thread CPU time (the machine is shared with builds).
TEST(FloatMatmul, DISABLED_Bench) {
  const int64_t n_in = 4096, n_tok = 64, gemm_rows = 512;
  for (int level = 0; level <= static_cast<int>(max_supported_isa()); ++level) {
    for (DType type : kTypes) {
      const MatmulKernel k = float_matmul_kernel(type, static_cast<Isa>(level));
      const int64_t n_out = type == DType::kF32 ? 4096 : 8192;
      const Problem p = make_problem(k, type, n_in, n_out, n_tok, 5, 0.02f);
      std::vector<float> y(static_cast<size_t>(n_tok * n_out));
      auto time = [&](int64_t nt, int64_t rows) {
        std::vector<double> secs;
        for (int rep = 0; rep < 7; ++rep) {
          const double t0 = thread_seconds();
          k.rows(p.w.data(), p.w_row_bytes, n_in, p.xa.data(), p.xa_stride, nt, y.data(), n_out, 0, rows);
          secs.push_back(thread_seconds() - t0);
        }
        return median(secs);
      };
      const double gemv = time(1, n_out);
      const double gemm = time(n_tok, gemm_rows);
      std::printf("%-18s GEMV %4lldx%lld: %6.2f ms %6.1f GB/s   GEMM %lldx%lldx%lld: %7.1f GFLOP/s\n", k.name,
                  static_cast<long long>(n_out), static_cast<long long>(n_in), gemv * 1e3,
                  static_cast<double>(p.w.size()) / gemv * 1e-9, static_cast<long long>(gemm_rows),
                  static_cast<long long>(n_in), static_cast<long long>(n_tok),
                  2.0 * static_cast<double>(gemm_rows * n_in * n_tok) / gemm * 1e-9);
    }
  }
}

}  // namespace
}  // namespace sluice::cpu
