// Fast ops at every level the CPU has, against the ops.h scalar references, with
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

TEST(FastOps, RmsnormMatchesReference) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 16, 31, 64, 80, 128, 1000, 4097}) {
      const int64_t n_tok = 3;
      const auto x = random_floats(static_cast<size_t>(n * n_tok), 1, 3.0f);
      const auto w = random_floats(static_cast<size_t>(n), 2);
      std::vector<float> ref(x.size());
      cpu::rmsnorm(x.data(), w.data(), ref.data(), n_tok, n, 1e-5f);
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
          cpu::rope(ref.data(), n_heads, head_dim, n_rot, cs.data(), layout);
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

TEST(FastOps, SwigluMatchesReference) {
  for (Isa isa : levels()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1001}) {
      auto gate = random_floats(static_cast<size_t>(n), 4, 4.0f);
      const auto up = random_floats(static_cast<size_t>(n), 5);
      // Saturating values: silu(-100) ~ -0, silu(100) = 100.
      if (n > 3) { gate[0] = -100.0f; gate[1] = 100.0f; gate[2] = -20.0f; }
      std::vector<float> ref(static_cast<size_t>(n));
      cpu::swiglu(gate.data(), up.data(), ref.data(), n);
      GuardedFloats out(static_cast<size_t>(n));
      fast::swiglu(gate.data(), up.data(), out.data(), n, isa);
      EXPECT_TRUE(out.guards_intact()) << isa_name(isa) << " n=" << n;
      EXPECT_LT(nmse(out.data(), ref.data(), ref.size()), 1e-12) << isa_name(isa) << " n=" << n;
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(out.data()[i], ref[i], 1e-6 * (1 + std::abs(ref[i]))) << isa_name(isa) << " i=" << i;
      GuardedFloats inplace(static_cast<size_t>(n));  // out aliases gate
      copy_in(inplace, gate);
      fast::swiglu(inplace.data(), up.data(), inplace.data(), n, isa);
      EXPECT_TRUE(same_bits(inplace.data(), out.data(), static_cast<size_t>(n))) << isa_name(isa);
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

// A K/V cache of n_ctx positions and queries for tokens at pos0 .. n_ctx - 1.
struct AttnProblem {
  int64_t n_head, n_head_kv, head_dim, n_ctx, pos0;
  std::vector<float> q, k, v;
  AttentionArgs args(float* out, int64_t t0, int64_t n_tokens) const {
    return AttentionArgs{.q = q.data() + t0 * n_head * head_dim, .k = k.data(), .v = v.data(), .out = out,
                         .n_tokens = n_tokens, .pos0 = pos0 + t0, .n_head = n_head, .n_head_kv = n_head_kv,
                         .head_dim = head_dim, .scale = 1.0f / std::sqrt(static_cast<float>(head_dim))};
  }
};

AttnProblem make_attn(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_ctx, int64_t n_tokens,
                      uint32_t seed) {
  AttnProblem p{n_head, n_head_kv, head_dim, n_ctx, n_ctx - n_tokens, {}, {}, {}};
  // Scale 2 makes scores spread widely, so the running max changes often.
  p.q = random_floats(static_cast<size_t>(n_tokens * n_head * head_dim), seed, 2.0f);
  p.k = random_floats(static_cast<size_t>(n_ctx * n_head_kv * head_dim), seed + 1);
  p.v = random_floats(static_cast<size_t>(n_ctx * n_head_kv * head_dim), seed + 2);
  return p;
}

// Runs both phases thread by thread (ti = 0 .. nt-1 in sequence) on guarded buffers.
std::vector<float> run_attn(const AttnProblem& p, int64_t t0, int64_t n_tokens, int nt, Isa isa, bool* ok) {
  GuardedFloats out(static_cast<size_t>(n_tokens * p.n_head * p.head_dim));
  const AttentionArgs a = p.args(out.data(), t0, n_tokens);
  GuardedFloats partials(fast::attention_partials_floats(a, nt));
  for (int ti = 0; ti < nt; ++ti) fast::attention_partial(a, partials.data(), ti, nt, isa);
  for (int ti = 0; ti < nt; ++ti) fast::attention_combine(a, partials.data(), ti, nt);
  *ok = out.guards_intact() && partials.guards_intact();
  return std::vector<float>(out.data(), out.data() + out.size());
}

TEST(FastOps, AttentionMatchesReferenceAndDecodeEqualsPrefill) {
  struct Heads { int64_t n_head, n_head_kv; };
  for (Isa isa : levels()) {
    for (Heads h : {Heads{4, 4}, Heads{8, 2}, Heads{16, 2}}) {
      for (int64_t head_dim : {64, 128, 80, 36}) {
        for (int64_t n_ctx : {1, 17, 300, 1500}) {
          const int64_t n_tok = std::min<int64_t>(n_ctx, 6);  // > kAttnSplitMaxTokens: item split
          const AttnProblem p = make_attn(h.n_head, h.n_head_kv, head_dim, n_ctx, n_tok,
                                          static_cast<uint32_t>(head_dim * 7 + n_ctx));
          SCOPED_TRACE(::testing::Message() << isa_name(isa) << " heads " << h.n_head << "/" << h.n_head_kv
                                            << " head_dim=" << head_dim << " n_ctx=" << n_ctx);
          ThreadPool ref_pool(2);
          std::vector<float> ref(static_cast<size_t>(n_tok * h.n_head * head_dim));
          std::vector<float> scratch(static_cast<size_t>(2 * head_dim));
          cpu::attention(p.args(ref.data(), 0, n_tok), scratch.data(), ref_pool);

          bool ok = true;
          const auto prefill = run_attn(p, 0, n_tok, 1, isa, &ok);
          ASSERT_TRUE(ok);
          EXPECT_LT(nmse(prefill.data(), ref.data(), ref.size()), 1e-10);
          const size_t row = static_cast<size_t>(h.n_head * head_dim);
          for (int nt = 1; nt <= 3; ++nt) {
            // Thread count does not change a bit.
            EXPECT_TRUE(same_bits(run_attn(p, 0, n_tok, nt, isa, &ok).data(), prefill.data(), prefill.size()))
                << "nt=" << nt;
            ASSERT_TRUE(ok);
            // Each token decoded alone (split-KV once the context spans chunks) equals its prefill row.
            for (int64_t t = 0; t < n_tok; ++t) {
              const auto one = run_attn(p, t, 1, nt, isa, &ok);
              ASSERT_TRUE(ok);
              EXPECT_TRUE(same_bits(one.data(), prefill.data() + t * row, row)) << "token " << t << " nt=" << nt;
            }
            // A small batch (split-KV) of the last 3 tokens.
            if (n_tok >= 3) {
              const auto three = run_attn(p, n_tok - 3, 3, nt, isa, &ok);
              ASSERT_TRUE(ok);
              EXPECT_TRUE(same_bits(three.data(), prefill.data() + (n_tok - 3) * row, 3 * row)) << "nt=" << nt;
            }
          }
        }
      }
    }
  }
}

TEST(FastOps, AttentionSplitChoiceAndPoolRun) {
  const AttnProblem p = make_attn(8, 2, 64, 1500, 6, 9);
  std::vector<float> tmp(16);
  EXPECT_TRUE(fast::attention_uses_split(p.args(tmp.data(), 5, 1)));      // decode, 6 chunks
  EXPECT_FALSE(fast::attention_uses_split(p.args(tmp.data(), 0, 6)));     // prefill batch
  const AttnProblem small = make_attn(8, 2, 64, 100, 1, 9);
  EXPECT_FALSE(fast::attention_uses_split(small.args(tmp.data(), 0, 1)));  // one chunk
  for (int nt = 1; nt <= 3; ++nt) {
    ThreadPool pool(nt);
    for (int64_t n_tokens : {1, 6}) {
      GuardedFloats out(static_cast<size_t>(n_tokens * 8 * 64));
      const AttentionArgs a = p.args(out.data(), 6 - n_tokens, n_tokens);
      // Sized once for the largest call, used for a smaller one.
      GuardedFloats partials(fast::attention_partials_floats(p.args(nullptr, 0, 6), pool.n_threads()));
      fast::attention(a, partials.data(), pool);
      bool ok = true;
      const auto direct = run_attn(p, 6 - n_tokens, n_tokens, 1, active_isa(), &ok);
      EXPECT_TRUE(out.guards_intact() && partials.guards_intact());
      EXPECT_TRUE(same_bits(out.data(), direct.data(), direct.size())) << "nt=" << nt << " n_tokens=" << n_tokens;
    }
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

// Decode attention over a long context (run with --gtest_also_run_disabled_tests):
// GB/s of K/V read, reference vs fast, 1 and 2 threads. Medians of 9 runs.
// Each K/V row is counted once (the query heads of a group share it).
TEST(FastOps, DISABLED_BenchAttentionDecode) {
  const int64_t n_head = 32, n_head_kv = 8, head_dim = 128, n_ctx = 8192;
  const AttnProblem p = make_attn(n_head, n_head_kv, head_dim, n_ctx, 1, 3);
  const double kv_bytes = 2.0 * n_ctx * n_head_kv * head_dim * 4;
  std::vector<float> out(static_cast<size_t>(n_head * head_dim));
  for (int nt = 1; nt <= 2; ++nt) {
    ThreadPool pool(nt);
    std::vector<float> partials(fast::attention_partials_floats(p.args(nullptr, 0, 1), nt));
    std::vector<float> scratch(static_cast<size_t>(nt * head_dim));
    // One thread: thread CPU time (robust to other load); two: wall time.
    auto time = [&](auto fn) {
      std::vector<double> secs;
      for (int rep = 0; rep < 9; ++rep) {
        const auto w0 = std::chrono::steady_clock::now();
        const double t0 = thread_seconds();
        fn();
        secs.push_back(nt == 1 ? thread_seconds() - t0
                               : std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
      }
      return median(secs);
    };
    const AttentionArgs a = p.args(out.data(), 0, 1);
    const double ref = time([&] { cpu::attention(a, scratch.data(), pool); });
    std::printf("attention decode n_ctx=%lld heads %lld/%lld d=%lld, %d thread(s): reference %.2f ms (%.1f GB/s)\n",
                static_cast<long long>(n_ctx), static_cast<long long>(n_head), static_cast<long long>(n_head_kv),
                static_cast<long long>(head_dim), nt, ref * 1e3, kv_bytes / ref * 1e-9);
    for (Isa isa : levels()) {
      const double fast = time([&] { fast::attention(a, partials.data(), pool, isa); });
      std::printf("  %-7s %.3f ms (%.1f GB/s of K/V)\n", isa_name(isa), fast * 1e3, kv_bytes / fast * 1e-9);
    }
  }
}

}  // namespace
}  // namespace sluice::cpu::fast
