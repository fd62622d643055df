// Every operator of the CPU backend against the reference backend, the way a
// new backend is tested: same inputs, outputs in guarded NaN-poisoned
// buffers, compared by normalized error. Plus the contracts the engine relies
// on: a token's output does not depend on the batch around it (bit for bit),
// and prepared (repacked) weights give the bits of GGUF rows.
#include "backend/backend.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/reference_backend.h"
#include "kv/kv_store.h"
#include "quant/quant.h"

namespace sluice {
namespace {

using cpu::testing::GuardedFloats;
using cpu::testing::nmse;
using cpu::testing::random_floats;

// 8-bit activations for quantized weights (see cpu/quant_matmul_test.cpp; the
// normed rows here, scaled by Gaussian norm weights, have heavier tails than
// its Gaussian inputs, and blocks of 256 share one scale); float weights
// differ from the reference only in summation order.
double bound(DType t) {
  if (t == DType::kF32) return 1e-10;
  if (t == DType::kF16 || t == DType::kBF16) return 1e-5;
  if (t == DType::kQ4_K || t == DType::kQ6_K) return 4e-4;
  return 1.5e-4;
}

// A quantized matrix [n_out, n_in] and its view.
struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;
  Matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto f = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.05f);
    bytes.resize(row_bytes(type, n_in) * static_cast<size_t>(n_out));
    quantize_tensor(type, f.data(), bytes.data(), n_out, n_in);
    view = WeightView{.type = type, .data = bytes.data(), .n_in = n_in, .n_out = n_out};
  }
};

class BackendOps : public ::testing::TestWithParam<DType> {
 protected:
  cpu::CpuBackend cpu_{{.n_threads = 2}};
  ReferenceBackend ref_;
  void reserve(const ScratchNeeds& n) {
    cpu_.reserve(n);
    ref_.reserve(n);
  }
};

TEST_P(BackendOps, NormMatmulAndGluMatmulMatchTheReference) {
  const DType type = GetParam();
  const int64_t n_embd = 256, n_ff = 512, n_tok = 7;
  reserve({.n_tok = n_tok, .n_in_max = n_ff});
  Matrix gate(type, n_embd, n_ff, 1), up(type, n_embd, n_ff, 2), down(type, n_ff, n_embd, 3);
  const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 4);
  const auto norm = random_floats(static_cast<size_t>(n_embd), 5);
  struct Out {
    GuardedFloats xn, g, u, y;
    explicit Out(int64_t t, int64_t e, int64_t f) : xn(t * e), g(t * f), u(t * f), y(t * e) {}
  };
  auto run = [&](Backend& be, Out& o) {
    const MatmulOut gu[2] = {{gate.view, o.g.data()}, {up.view, o.u.data()}};
    be.norm_matmul({.x = x.data(), .norm = norm.data(), .eps = 1e-5f, .xn = o.xn.data(), .n_embd = n_embd,
                    .n_tok = n_tok, .outs = gu});
    be.glu_matmul({.gate = o.g.data(), .up = o.u.data(), .n_ff = n_ff, .n_tok = n_tok, .out = {down.view, o.y.data()}});
  };
  Out a(n_tok, n_embd, n_ff), b(n_tok, n_embd, n_ff);
  run(cpu_, a);
  run(ref_, b);
  EXPECT_TRUE(a.xn.guards_intact() && a.g.guards_intact() && a.u.guards_intact() && a.y.guards_intact());
  EXPECT_LT(nmse(a.xn.data(), b.xn.data(), a.xn.size()), 1e-10);
  EXPECT_LT(nmse(a.u.data(), b.u.data(), a.u.size()), bound(type));
  EXPECT_LT(nmse(a.y.data(), b.y.data(), a.y.size()), 4 * bound(type));
}

TEST_P(BackendOps, GegluMatmulMatchesTheReference) {
  const DType type = GetParam();
  const int64_t n_embd = 256, n_ff = 512, n_tok = 6;
  reserve({.n_tok = n_tok, .n_in_max = n_ff});
  Matrix down(type, n_ff, n_embd, 11);
  const auto g0 = random_floats(static_cast<size_t>(n_tok * n_ff), 12, 3.0f);
  const auto u = random_floats(static_cast<size_t>(n_tok * n_ff), 13);
  auto run = [&](Backend& be, GuardedFloats& g, GuardedFloats& y) {
    std::copy(g0.begin(), g0.end(), g.data());
    be.glu_matmul({.gate = g.data(), .up = u.data(), .n_ff = n_ff, .n_tok = n_tok, .act = Activation::kGelu,
                   .out = {down.view, y.data()}});
  };
  GuardedFloats ga(n_tok * n_ff), ya(n_tok * n_embd), gb(n_tok * n_ff), yb(n_tok * n_embd);
  run(cpu_, ga, ya);
  run(ref_, gb, yb);
  EXPECT_TRUE(ga.guards_intact() && ya.guards_intact());
  EXPECT_LT(nmse(ga.data(), gb.data(), ga.size()), 1e-11);  // h = gelu(g) * u
  EXPECT_LT(nmse(ya.data(), yb.data(), ya.size()), 4 * bound(type));
  // GeGLU is not SwiGLU: the same inputs through SiLU give another h.
  GuardedFloats gs(n_tok * n_ff), ys(n_tok * n_embd);
  std::copy(g0.begin(), g0.end(), gs.data());
  ref_.glu_matmul({.gate = gs.data(), .up = u.data(), .n_ff = n_ff, .n_tok = n_tok, .out = {down.view, ys.data()}});
  EXPECT_GT(nmse(gs.data(), gb.data(), gs.size()), 1e-3);
}

TEST_P(BackendOps, RmsnormMatchesTheReference) {
  const int64_t n = 320, n_tok = 9;
  const auto x = random_floats(static_cast<size_t>(n_tok * n), 14, 5.0f);
  const auto w = random_floats(static_cast<size_t>(n), 15);
  GuardedFloats a(n_tok * n), b(n_tok * n), inplace(n_tok * n);
  cpu_.rmsnorm(x.data(), w.data(), 1e-6f, a.data(), n_tok, n);
  ref_.rmsnorm(x.data(), w.data(), 1e-6f, b.data(), n_tok, n);
  EXPECT_TRUE(a.guards_intact());
  EXPECT_LT(nmse(a.data(), b.data(), a.size()), 1e-12);
  std::copy(x.begin(), x.end(), inplace.data());
  cpu_.rmsnorm(inplace.data(), w.data(), 1e-6f, inplace.data(), n_tok, n);
  EXPECT_EQ(0, std::memcmp(inplace.data(), a.data(), a.size() * sizeof(float)));
}

TEST_P(BackendOps, PreparedWeightsGiveTheBitsOfGgufRows) {
  const DType type = GetParam();
  const int64_t n_in = 256, n_out = 64, n_tok = 5;
  reserve({.n_tok = n_tok, .n_in_max = n_in});
  Matrix q(type, n_in, n_out, 7), k(type, n_in, n_out, 8);
  WeightView pq = q.view, pk = k.view;
  WeightView* group[2] = {&pq, &pk};
  const WeightGroup groups[1] = {group};
  const PreparedWeights prepared = cpu_.prepare_weights(groups);
  if (cpu_.isa() != cpu::Isa::kScalar) {
    EXPECT_NE(pq.data, q.view.data);  // copied into the backend's arena
  }
  const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 9);
  GuardedFloats y0(n_tok * n_out), y1(n_tok * n_out), z0(n_tok * n_out), z1(n_tok * n_out);
  const MatmulOut rows[2] = {{q.view, y0.data()}, {k.view, z0.data()}};
  const MatmulOut packed[2] = {{pq, y1.data()}, {pk, z1.data()}};
  cpu_.matmul(rows, x.data(), n_in, n_tok);
  cpu_.matmul(packed, x.data(), n_in, n_tok);
  EXPECT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * 4), 0);
  EXPECT_EQ(std::memcmp(z0.data(), z1.data(), z0.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, BackendOps,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Three sequences over scrambled blocks: bias, RoPE and the K/V store, then
// attention, on both backends with their own stores.
class AttentionOps : public ::testing::TestWithParam<KvDtype> {};

TEST_P(AttentionOps, QkvStoreAndAttentionMatchTheReference) {
  const int64_t n_head = 8, n_head_kv = 2, head_dim = 64, n_rot = 64, bs = 16;
  const int64_t n_q = n_head * head_dim, n_kv = n_head_kv * head_dim;
  const KvLayout layout{.n_layer = 2, .n_embd_kv = n_kv, .block_size = bs, .dtype = GetParam(), .n_head_kv = n_head_kv};
  // Sequence i: n_tok[i] new tokens at pos0[i], blocks taken from a shuffled pool.
  const int64_t pos0[3] = {0, 37, 5}, n_tok[3] = {20, 1, 9};
  std::vector<int32_t> pool(12);
  std::iota(pool.begin(), pool.end(), 0);
  std::reverse(pool.begin(), pool.end());
  std::vector<std::vector<int32_t>> tables = {{pool[0], pool[1]}, {pool[2], pool[3], pool[4]}, {pool[5]}};
  int64_t n = 0;
  for (int64_t t : n_tok) n += t;
  std::vector<int64_t> rows, positions;
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < n_tok[i]; ++j) {
      const int64_t p = pos0[i] + j;
      positions.push_back(p);
      rows.push_back(int64_t{tables[static_cast<size_t>(i)][static_cast<size_t>(p / bs)]} * bs + p % bs);
    }
  std::vector<double> inv_freq(n_rot / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot);
  const auto bq = random_floats(static_cast<size_t>(n_q), 11), bk = random_floats(static_cast<size_t>(n_kv), 12);

  auto run = [&](Backend& be, std::vector<float>& out) {
    be.reserve({.n_tok = n, .n_in_max = n_q, .n_ctx = 64, .n_head = n_head, .n_head_kv = n_head_kv,
                .head_dim = head_dim, .max_seqs = 3});
    KvStore kv = be.create_kv(layout, 12).value();
    std::vector<float> cs(static_cast<size_t>(n * n_rot));
    be.rope_tables(positions, inv_freq, 1.0, cs.data());
    // Earlier positions of each sequence first (their own step), then this step.
    auto q = random_floats(static_cast<size_t>(n * n_q), 13), k = random_floats(static_cast<size_t>(n * n_kv), 14);
    auto v = random_floats(static_cast<size_t>(n * n_kv), 15);
    for (int64_t p = 0; p < 64; ++p) {  // history rows, stored as they are
      const auto hk = random_floats(static_cast<size_t>(n_kv), 100 + static_cast<uint32_t>(p));
      for (int i = 0; i < 3; ++i) {
        const auto& tb = tables[static_cast<size_t>(i)];
        if (p >= pos0[i] || p / bs >= static_cast<int64_t>(tb.size())) continue;
        const int64_t row = int64_t{tb[static_cast<size_t>(p / bs)]} * bs + p % bs;
        kv.store_row(hk.data(), kv.k_layer(1), row);
        kv.store_row(hk.data(), kv.v_layer(1), row);
      }
    }
    be.qkv_store({.q = q.data(), .k = k.data(), .v = v.data(), .bq = bq.data(), .bk = bk.data(), .cos_sin = cs.data(),
                  .n_tok = n, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim, .n_rot = n_rot,
                  .rope = RopeLayout::kNeox, .kv = &kv, .layer = 1, .kv_rows = rows.data()});
    out.assign(static_cast<size_t>(n * n_q), std::numeric_limits<float>::quiet_NaN());
    std::vector<AttentionSeq> seqs;
    int64_t t = 0;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back({.q = q.data() + t * n_q, .out = out.data() + t * n_q, .n_tok = n_tok[i], .pos0 = pos0[i],
                      .block_table = tables[static_cast<size_t>(i)].data()});
      t += n_tok[i];
    }
    be.attention({.seqs = seqs, .kv = &kv, .layer = 1, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                  .scale = 0.125f});
  };
  cpu::CpuBackend cpu({.n_threads = 2});
  ReferenceBackend ref;
  std::vector<float> a, b;
  run(cpu, a);
  run(ref, b);
  EXPECT_LT(nmse(a.data(), b.data(), a.size()), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, AttentionOps, ::testing::Values(KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0),
                         [](const auto& info) { return std::string(kv_dtype_name(info.param)); });

// Routed experts: the CPU backend against the reference, and a token's output
// the same bits alone as inside a batch routed elsewhere.
TEST(ExpertFfn, MatchesTheReferenceAndIsPerTokenDeterministic) {
  const int64_t n_expert = 6, n_used = 2, n_embd = 128, n_ff = 96, n_tok = 9;
  std::vector<Matrix> mats;
  std::vector<ExpertWeights> experts;
  for (int64_t e = 0; e < n_expert; ++e) {
    mats.emplace_back(DType::kQ8_0, n_embd, n_ff, 20 + static_cast<uint32_t>(e));
    mats.emplace_back(DType::kQ8_0, n_embd, n_ff, 40 + static_cast<uint32_t>(e));
    mats.emplace_back(DType::kQ8_0, n_ff, n_embd, 60 + static_cast<uint32_t>(e));
  }
  for (int64_t e = 0; e < n_expert; ++e)
    experts.push_back({mats[static_cast<size_t>(3 * e)].view, mats[static_cast<size_t>(3 * e + 1)].view,
                       mats[static_cast<size_t>(3 * e + 2)].view});
  const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 70);
  std::vector<int32_t> ids(static_cast<size_t>(n_tok * n_used));
  std::vector<float> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 5 + i / 2) % n_expert);
    w[i] = 0.25f + 0.5f * static_cast<float>(i % 2);
  }
  const ScratchNeeds needs{.n_tok = n_tok, .n_in_max = n_ff, .n_expert = n_expert, .n_used = n_used,
                           .n_ff_expert = n_ff, .n_embd = n_embd};
  cpu::CpuBackend cpu({.n_threads = 2});
  ReferenceBackend ref;
  cpu.reserve(needs);
  ref.reserve(needs);
  auto run = [&](Backend& be, int64_t t0, int64_t nt, float* out) {
    be.expert_ffn({.x = x.data() + t0 * n_embd, .out = out, .ids = ids.data() + t0 * n_used,
                   .weights = w.data() + t0 * n_used, .n_tok = nt, .n_used = n_used, .n_embd = n_embd, .n_ff = n_ff,
                   .experts = experts});
  };
  GuardedFloats a(n_tok * n_embd), b(n_tok * n_embd);
  run(cpu, 0, n_tok, a.data());
  run(ref, 0, n_tok, b.data());
  EXPECT_TRUE(a.guards_intact());
  EXPECT_LT(nmse(a.data(), b.data(), a.size()), 6e-4);
  for (int64_t t = 0; t < n_tok; ++t) {
    GuardedFloats one(n_embd);
    run(cpu, t, 1, one.data());
    ASSERT_EQ(std::memcmp(one.data(), a.data() + t * n_embd, static_cast<size_t>(n_embd) * 4), 0) << "token " << t;
  }
}

TEST(Backend, EmbedAndLogitsMatchTheReference) {
  const int64_t n_embd = 64, n_vocab = 96;
  Matrix table(DType::kQ8_0, n_embd, n_vocab, 80);
  cpu::CpuBackend cpu({.n_threads = 2});
  ReferenceBackend ref;
  const std::vector<int32_t> toks = {5, 95, 0, 5};
  const auto norm = random_floats(static_cast<size_t>(n_embd), 81);
  const int64_t rows[2] = {3, 1};
  auto run = [&](Backend& be, std::vector<float>& x, std::vector<float>& logits) {
    be.reserve({.n_tok = 4, .n_in_max = n_embd});
    x.assign(toks.size() * n_embd, 0.0f);
    be.embed(table.view, toks, 2.0f, x.data());
    std::vector<float> xn(2 * n_embd);
    logits.assign(2 * n_vocab, std::numeric_limits<float>::quiet_NaN());
    be.logits({.x = x.data(), .rows = rows, .n_out = 2, .norm = norm.data(), .eps = 1e-5f, .n_embd = n_embd,
               .xn = xn.data(), .output = table.view, .logits = logits.data()});
  };
  std::vector<float> xa, la, xb, lb;
  run(cpu, xa, la);
  run(ref, xb, lb);
  EXPECT_EQ(xa, xb);  // a dequantized row times 2 is exact
  EXPECT_LT(nmse(la.data(), lb.data(), la.size()), 1.5e-4);
}

TEST(Backend, SupportsAndCreateSayWhatIsThere) {
  cpu::CpuBackend cpu({.n_threads = 1});
  EXPECT_TRUE(cpu.supports(Op::kMatmul, {.weight = DType::kQ4_K}));
  EXPECT_TRUE(cpu.supports(Op::kGluMatmul, {.weight = DType::kQ8_0, .act = Activation::kGelu}));
  EXPECT_FALSE(cpu.supports(Op::kExpertFfn, {.weight = DType::kQ8_0, .act = Activation::kGelu}));
  EXPECT_TRUE(create_backend({.name = "reference"}).ok());
  auto bad = create_backend({.name = "tpu"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cpu, cuda, reference"), std::string::npos);
  // "cuda" is known by name in every build: without nvcc, or without a GPU,
  // creating it fails with the reason, never with "unknown backend".
  auto gpu = create_backend({.name = "cuda"});
  if (!gpu.ok()) {
    EXPECT_EQ(gpu.status().message().find("unknown backend"), std::string::npos) << gpu.status().to_string();
  }
}

}  // namespace
}  // namespace sluice
