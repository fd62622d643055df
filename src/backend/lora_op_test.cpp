// Backend::lora of the CPU backend against the reference backend, in the way
// of backend_test.cpp: same inputs, outputs in guarded NaN-poisoned buffers,
// compared by normalized error; rows in no segment keep their bits; a token
// alone gives the bits it gives in a batch, at every instruction-set level and
// thread count; the u output (A x, kept for training) is written as asked.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/reference_backend.h"

namespace sluice {
namespace {

using cpu::testing::GuardedFloats;
using cpu::testing::nmse;
using cpu::testing::random_floats;

struct LoraShape {
  int64_t n_in, n_out, rank;
};

// One adapter's factors.
struct Factors {
  std::vector<float> a, b;
  Factors(const LoraShape& s, uint32_t seed)
      : a(random_floats(static_cast<size_t>(s.rank * s.n_in), seed, 0.1f)),
        b(random_floats(static_cast<size_t>(s.n_out * s.rank), seed + 1, 0.1f)) {}
};

// A call over n_tok rows: segments of two adapters with a gap between them
// (rows 0 .. n_tok - 1; the rows in [gap0, gap1) are in no segment).
struct Case {
  LoraShape shape;
  int64_t n_tok;
  Factors f0, f1;
  std::vector<float> x, y0;
  std::vector<LoraSegment> segs;
  int64_t gap0, gap1;
  Case(const LoraShape& s, int64_t n, uint32_t seed)
      : shape(s), n_tok(n), f0(s, seed), f1(s, seed + 7),
        x(random_floats(static_cast<size_t>(n * s.n_in), seed + 2)),
        y0(random_floats(static_cast<size_t>(n * s.n_out), seed + 3)) {
    const int64_t first = n / 3, gap = n > 3 ? 1 : 0;
    gap0 = first;
    gap1 = first + gap;
    segs.push_back({.tok0 = 0, .n_tok = first, .a = f0.a.data(), .b = f0.b.data(), .rank = s.rank, .scale = 2.0f});
    segs.push_back({.tok0 = gap1, .n_tok = n - gap1, .a = f1.a.data(), .b = f1.b.data(), .rank = s.rank,
                    .scale = -0.5f});
  }
  // Runs the call on `be` into y (starting from y0) and, when u is set, u.
  void run(Backend& be, GuardedFloats& y, GuardedFloats* u, std::span<const LoraSegment> s) const {
    std::copy(y0.begin(), y0.end(), y.data());
    be.lora({.x = x.data(), .y = y.data(), .n_in = shape.n_in, .n_out = shape.n_out, .segs = s,
             .u = u ? u->data() : nullptr, .u_stride = shape.rank + 3});
  }
};

class LoraOp : public ::testing::TestWithParam<LoraShape> {};

TEST_P(LoraOp, CpuMatchesTheReferenceAtEveryLevel) {
  const LoraShape s = GetParam();
  const int64_t n_tok = 11;
  const Case c(s, n_tok, 21);
  ReferenceBackend ref;
  GuardedFloats ry(n_tok * s.n_out), ru(n_tok * (s.rank + 3));
  c.run(ref, ry, &ru, c.segs);
  for (int level = 0; level <= static_cast<int>(cpu::max_supported_isa()); ++level) {
    const auto isa = static_cast<cpu::Isa>(level);
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::CpuBackend be({.n_threads = 2, .isa = isa});
    be.reserve({.n_tok = n_tok, .lora_rank = s.rank});
    ASSERT_TRUE(be.supports(Op::kLora, {}));
    GuardedFloats y(n_tok * s.n_out), u(n_tok * (s.rank + 3)), y_no_u(n_tok * s.n_out);
    c.run(be, y, &u, c.segs);
    c.run(be, y_no_u, nullptr, c.segs);
    EXPECT_TRUE(y.guards_intact() && u.guards_intact() && y_no_u.guards_intact());
    EXPECT_LT(nmse(y.data(), ry.data(), y.size()), 1e-12);
    // Keeping u changes nothing in y.
    EXPECT_EQ(0, std::memcmp(y.data(), y_no_u.data(), y.size() * sizeof(float)));
    for (int64_t t = 0; t < n_tok; ++t) {
      const bool in_gap = t >= c.gap0 && t < c.gap1;
      const float* ut = u.data() + t * (s.rank + 3);
      const float* rt = ru.data() + t * (s.rank + 3);
      if (in_gap) {
        // Rows in no segment: y untouched, u not written.
        EXPECT_EQ(0, std::memcmp(y.data() + t * s.n_out, c.y0.data() + t * s.n_out, s.n_out * sizeof(float)));
        for (int64_t r = 0; r < s.rank; ++r) EXPECT_TRUE(std::isnan(ut[r]));
      } else {
        EXPECT_LT(nmse(ut, rt, static_cast<size_t>(s.rank)), 1e-12) << "token " << t;
      }
      // u's padding past the rank is never written.
      for (int64_t r = s.rank; r < s.rank + 3; ++r) EXPECT_TRUE(std::isnan(ut[r]));
    }
  }
}

TEST_P(LoraOp, ATokenAloneEqualsTheSameTokenInABatchBitForBit) {
  const LoraShape s = GetParam();
  const int64_t n_tok = 13;
  const Case c(s, n_tok, 33);
  for (int level = 0; level <= static_cast<int>(cpu::max_supported_isa()); ++level) {
    const auto isa = static_cast<cpu::Isa>(level);
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::CpuBackend two({.n_threads = 2, .isa = isa}), one({.n_threads = 1, .isa = isa});
    two.reserve({.n_tok = n_tok, .lora_rank = s.rank});
    one.reserve({.n_tok = n_tok, .lora_rank = s.rank});
    GuardedFloats batch(n_tok * s.n_out), single_thread(n_tok * s.n_out);
    c.run(two, batch, nullptr, c.segs);
    c.run(one, single_thread, nullptr, c.segs);
    EXPECT_EQ(0, std::memcmp(batch.data(), single_thread.data(), batch.size() * sizeof(float)));
    // Each token as a call of its own, in its own segment (one token is below
    // the inline threshold; the batch above runs on the pool for large shapes).
    for (const LoraSegment& sg : c.segs) {
      for (int64_t t = sg.tok0; t < sg.tok0 + sg.n_tok; ++t) {
        LoraSegment alone = sg;
        alone.tok0 = t;
        alone.n_tok = 1;
        GuardedFloats y(n_tok * s.n_out);
        c.run(two, y, nullptr, std::span(&alone, 1));
        EXPECT_EQ(0, std::memcmp(y.data() + t * s.n_out, batch.data() + t * s.n_out, s.n_out * sizeof(float)))
            << "token " << t;
      }
    }
  }
}

// stories260K's shapes (rank 4, n_in 172), ranks that are not a multiple of
// the vector width, n_out with a tail past the last group of 8, and a
// 110m-sized matrix whose batch is large enough to run on the pool.
INSTANTIATE_TEST_SUITE_P(Shapes, LoraOp,
                         ::testing::Values(LoraShape{64, 32, 4}, LoraShape{172, 64, 4}, LoraShape{64, 172, 4},
                                           LoraShape{100, 77, 13}, LoraShape{768, 768, 16},
                                           LoraShape{768, 2048, 8}, LoraShape{2048, 768, 64}),
                         [](const auto& info) {
                           const LoraShape& s = info.param;
                           return std::to_string(s.n_in) + "x" + std::to_string(s.n_out) + "r" +
                                  std::to_string(s.rank);
                         });

}  // namespace
}  // namespace sluice
