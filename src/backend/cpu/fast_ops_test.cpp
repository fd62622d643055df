// Fast ops at every level the CPU has, against the scalar references (ref::), with
// guarded and poisoned outputs; attention also for bit-identity between decode
// and prefill, between work splits, and across thread counts.
#include "backend/cpu/fast_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/op_test_util.h"
#include "backend/reference_ops.h"

namespace sluice::cpu::fast {
namespace {

using testing::GuardedFloats;
using testing::nmse;
using testing::random_floats;

std::vector<Isa> levels() {
  std::vector<Isa> v;
  for (int l = 0; l <= static_cast<int>(max_supported_isa()); ++l) v.push_back(static_cast<Isa>(l));
  return v;
}

void copy_in(GuardedFloats& g, const std::vector<float>& v) { std::memcpy(g.data(), v.data(), v.size() * 4); }

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// out = op(gate, up) at `isa` against the reference op: guards intact, each
// element within tol x (1 + |ref|), and the same bits with out aliasing gate.
// Returns the normalized error against the reference.
double expect_gated_matches(void (*fast_op)(const float*, const float*, float*, int64_t, Isa),
                            void (*ref_op)(const float*, const float*, float*, int64_t),
                            const std::vector<float>& gate, const std::vector<float>& up, Isa isa, double tol) {
  const auto n = static_cast<int64_t>(gate.size());
  std::vector<float> ref(gate.size());
  ref_op(gate.data(), up.data(), ref.data(), n);
  GuardedFloats out(gate.size());
  fast_op(gate.data(), up.data(), out.data(), n, isa);
  EXPECT_TRUE(out.guards_intact()) << isa_name(isa) << " n=" << n;
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(out.data()[i], ref[i], tol * (1 + std::abs(ref[i]))) << isa_name(isa) << " i=" << i;
  GuardedFloats inplace(gate.size());  // out aliases gate
  copy_in(inplace, gate);
  fast_op(inplace.data(), up.data(), inplace.data(), n, isa);
  EXPECT_TRUE(same_bits(inplace.data(), out.data(), gate.size())) << isa_name(isa);
  return nmse(out.data(), ref.data(), ref.size());
}

TEST(FastOps, RmsnormMatchesReference) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 16, 31, 64, 80, 128, 1000, 4097}) {
      const int64_t n_tok = 3;
      const auto x = random_floats(static_cast<size_t>(n * n_tok), 1, 3.0f);
      const auto w = random_floats(static_cast<size_t>(n), 2);
      std::vector<float> ref(x.size());
      ref::rmsnorm(x.data(), w.data(), ref.data(), n_tok, n, 1e-5f);
      GuardedFloats out(x.size());
      fast::rmsnorm(x.data(), w.data(), out.data(), n_tok, n, 1e-5f, isa);
      EXPECT_TRUE(out.guards_intact()) << isa_name(isa) << " n=" << n;
      EXPECT_LT(nmse(out.data(), ref.data(), ref.size()), 1e-12) << isa_name(isa) << " n=" << n;
      // In place (x and out alias).
      GuardedFloats inplace(x.size());
      copy_in(inplace, x);
      fast::rmsnorm(inplace.data(), w.data(), inplace.data(), n_tok, n, 1e-5f, isa);
      EXPECT_TRUE(same_bits(inplace.data(), out.data(), x.size())) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(FastOps, RopeMatchesReferenceForBothLayouts) {
  for (Isa isa : levels()) {
    for (RopeLayout layout : {RopeLayout::kAdjacent, RopeLayout::kNeox}) {
      for (int64_t head_dim : {64, 128, 80, 36}) {
        for (int64_t n_rot : {head_dim, head_dim / 2, int64_t{2}, int64_t{34}}) {
          if (n_rot % 2 || n_rot > head_dim) continue;
          const int64_t n_heads = 3;
          const auto x = random_floats(static_cast<size_t>(n_heads * head_dim), 3);
          std::vector<float> cs(static_cast<size_t>(n_rot));
          for (int64_t i = 0; i < n_rot / 2; ++i) {
            const double angle = 17.0 * std::pow(10000.0, -2.0 * i / n_rot);
            cs[2 * i] = static_cast<float>(std::cos(angle));
            cs[2 * i + 1] = static_cast<float>(std::sin(angle));
          }
          std::vector<float> ref = x;
          ref::rope(ref.data(), n_heads, head_dim, n_rot, cs.data(), layout);
          GuardedFloats out(x.size());
          copy_in(out, x);
          fast::rope(out.data(), n_heads, head_dim, n_rot, cs.data(), layout, isa);
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " neox=" << (layout == RopeLayout::kNeox)
                                            << " head_dim=" << head_dim << " n_rot=" << n_rot);
          EXPECT_TRUE(out.guards_intact());
          EXPECT_LT(nmse(out.data(), ref.data(), ref.size()), 1e-12);
          for (int64_t h = 0; h < n_heads; ++h)  // dims past n_rot untouched
            EXPECT_TRUE(same_bits(out.data() + h * head_dim + n_rot, x.data() + h * head_dim + n_rot,
                                  static_cast<size_t>(head_dim - n_rot)));
        }
      }
    }
  }
}

TEST(FastOps, GegluMatchesReference) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1001}) {
      auto gate = random_floats(static_cast<size_t>(n), 6, 4.0f);
      const auto up = random_floats(static_cast<size_t>(n), 7);
      // Saturating values: gelu(-100) ~ -0, gelu(100) = 100, and the tanh's knee.
      if (n > 4) { gate[0] = -100.0f; gate[1] = 100.0f; gate[2] = -9.0f; gate[3] = 0.0f; }
      expect_gated_matches(fast::geglu, ref::geglu, gate, up, isa, 2e-6);
    }
  }
}

TEST(FastOps, SwigluMatchesReference) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1001}) {
      auto gate = random_floats(static_cast<size_t>(n), 4, 4.0f);
      const auto up = random_floats(static_cast<size_t>(n), 5);
      // Saturating values: silu(-100) ~ -0, silu(100) = 100.
      if (n > 3) { gate[0] = -100.0f; gate[1] = 100.0f; gate[2] = -20.0f; }
      const double err = expect_gated_matches(fast::swiglu, ref::swiglu, gate, up, isa, 1e-6);
      EXPECT_LT(err, 1e-12) << isa_name(isa) << " n=" << n;
    }
  }
}

TEST(FastOps, AddIsExact) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1001}) {
      const auto a = random_floats(static_cast<size_t>(n), 6), b = random_floats(static_cast<size_t>(n), 7);
      GuardedFloats out(static_cast<size_t>(n));
      fast::add(a.data(), b.data(), out.data(), n, isa);
      EXPECT_TRUE(out.guards_intact());
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out.data()[i], a[i] + b[i]) << isa_name(isa) << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace sluice::cpu::fast
