// Every operator of the CUDA backend against the reference backend, the way
// backend_test.cpp holds the CPU backend to it: same random inputs (never
// zeros), outputs NaN-poisoned before the run, compared by normalized error.
// Inputs go to device buffers from alloc() and results come back through
// read_floats(). Plus the engine's contract: a token's output does not depend
// on the batch around it (bit for bit). Without a usable GPU every test skips
// with the reason; in builds without nvcc the file is empty.
#ifdef SLUICE_HAVE_CUDA

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "backend/cpu/op_test_util.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/reference_backend.h"
#include "kv/kv_store.h"
#include "quant/quant.h"

namespace sluice {
namespace {

using cpu::testing::nmse;
using cpu::testing::random_floats;

using cuda::testing::Dev;
using cuda::testing::Matrix;
using cuda::testing::all_finite;
using cuda::testing::gpu;
using cuda::testing::to_device;

// Q4_0 and Q8_0 run against 8-bit activations (cuda_matmul_q8.cuh), as the
// CPU backend's do (backend_test.cpp bounds those at 1.5e-4): the activation
// times up, heavy-tailed, gives the down projection 2.0e-4..2.1e-4 on an H200;
// the other types decode to float and differ from the reference in summation
// order only.
double bound(DType t) { return t == DType::kQ4_0 || t == DType::kQ8_0 ? 4e-4 : 1e-9; }

class CudaOps : public ::testing::TestWithParam<DType> {};

TEST_P(CudaOps, NormMatmulAndGluMatmulMatchTheReference) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  ReferenceBackend ref;
  const DType type = GetParam();
  const int64_t n_embd = 512, n_ff = 768, n_tok = 11;
  // An odd-sized first part: the grouped launch's rows of two parts share a thread block.
  const int64_t n_small = 37;
  Matrix gate(type, n_embd, n_ff, 1), up(type, n_embd, n_ff, 2), down(type, n_ff, n_embd, 3), small(type, n_embd, n_small, 6);
  auto prepared = to_device(*be, {&gate.dev, &up.dev, &down.dev, &small.dev});
  const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 4);
  const auto norm = random_floats(static_cast<size_t>(n_embd), 5);
  for (Activation act : {Activation::kSilu, Activation::kGelu}) {
    be->reserve({.n_tok = n_tok, .n_in_max = n_ff});
    ref.reserve({.n_tok = n_tok, .n_in_max = n_ff});
    Dev dx(*be, x), xn(*be, n_tok * n_embd), g(*be, n_tok * n_ff), u(*be, n_tok * n_ff), y(*be, n_tok * n_embd);
    Dev sm(*be, n_tok * n_small);
    const MatmulOut gu[3] = {{small.dev, sm.p()}, {gate.dev, g.p()}, {up.dev, u.p()}};
    be->norm_matmul({.x = dx.p(), .norm = norm.data(), .eps = 1e-5f, .xn = xn.p(), .n_embd = n_embd, .n_tok = n_tok, .outs = gu});
    const auto g_gpu = g.host(*be);
    be->glu_matmul({.gate = g.p(), .up = u.p(), .n_ff = n_ff, .n_tok = n_tok, .act = act, .out = {down.dev, y.p()}});
    std::vector<float> rxn(x.size()), rg(static_cast<size_t>(n_tok * n_ff)), ru(rg.size()), ry(x.size());
    std::vector<float> rsm(static_cast<size_t>(n_tok * n_small));
    const MatmulOut rgu[3] = {{small.host, rsm.data()}, {gate.host, rg.data()}, {up.host, ru.data()}};
    ref.norm_matmul({.x = x.data(), .norm = norm.data(), .eps = 1e-5f, .xn = rxn.data(), .n_embd = n_embd, .n_tok = n_tok, .outs = rgu});
    EXPECT_LT(nmse(g_gpu.data(), rg.data(), rg.size()), bound(type));
    const auto sm_gpu = sm.host(*be);
    ASSERT_TRUE(all_finite(sm_gpu));
    EXPECT_LT(nmse(sm_gpu.data(), rsm.data(), rsm.size()), bound(type)) << "the 37-row part";
    ref.glu_matmul({.gate = rg.data(), .up = ru.data(), .n_ff = n_ff, .n_tok = n_tok, .act = act, .out = {down.host, ry.data()}});
    const auto yg = y.host(*be), xng = xn.host(*be);
    ASSERT_TRUE(all_finite(yg) && all_finite(xng));
    EXPECT_LT(nmse(xng.data(), rxn.data(), rxn.size()), 1e-11);
    EXPECT_LT(nmse(yg.data(), ry.data(), ry.size()), bound(type)) << (act == Activation::kGelu ? "geglu" : "swiglu");
  }
}

TEST_P(CudaOps, ATokensOutputIsTheSameAloneAndInABatch) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  const int64_t n_in = 1024, n_out = 300, n_tok = 13;
  Matrix w(GetParam(), n_in, n_out, 7);
  auto prepared = to_device(*be, {&w.dev});
  be->reserve({.n_tok = n_tok, .n_in_max = n_in});
  const auto x = random_floats(static_cast<size_t>(n_tok * n_in), 8);
  Dev dx(*be, x), all(*be, n_tok * n_out);
  const MatmulOut o[1] = {{w.dev, all.p()}};
  be->matmul(o, dx.p(), n_in, n_tok);
  const auto batched = all.host(*be);
  for (int64_t t = 0; t < n_tok; t += 4) {
    Dev one(*be, n_out);
    const MatmulOut o1[1] = {{w.dev, one.p()}};
    be->matmul(o1, dx.p() + t * n_in, n_in, 1);
    const auto alone = one.host(*be);
    ASSERT_EQ(std::memcmp(alone.data(), batched.data() + t * n_out, static_cast<size_t>(n_out) * 4), 0) << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaOps,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Three sequences over scrambled blocks (one decoding, two prefilling): bias,
// q/k norms, RoPE and the K/V store, then attention; each backend with its own
// store. Variants: KV dtype, head size, window, soft-cap, RoPE layout, and a
// long decode that splits the keys over blocks.
struct AttnCase {
  KvDtype kv;
  int64_t head_dim;
  int64_t window;
  float softcap;
  RopeLayout rope;
  int64_t decode_pos;  // the decoding sequence's position
  const char* name;
};

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttention, QkvStoreAndAttentionMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const AttnCase c = GetParam();
  const int64_t n_head = 8, n_head_kv = 2, head_dim = c.head_dim, n_rot = head_dim, bs = 16;
  const int64_t n_q = n_head * head_dim, n_kv = n_head_kv * head_dim;
  const KvLayout layout{.n_layer = 2, .n_embd_kv = n_kv, .block_size = bs, .dtype = c.kv, .n_head_kv = n_head_kv};
  const int64_t pos0[3] = {0, c.decode_pos, 5}, n_tok[3] = {20, 1, 9};
  const int64_t n_blocks = (c.decode_pos + 1 + bs - 1) / bs + 4;
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::reverse(pool.begin(), pool.end());
  const int64_t dec_blocks = (c.decode_pos + 1 + bs - 1) / bs;
  std::vector<std::vector<int32_t>> tables = {{pool[0], pool[1]}, {}, {pool[2]}};
  for (int64_t b = 0; b < dec_blocks; ++b) tables[1].push_back(pool[static_cast<size_t>(3 + b)]);
  int64_t n = 0;
  for (int64_t t : n_tok) n += t;
  std::vector<int64_t> rows, positions;
  for (int i = 0; i < 3; ++i)
    for (int64_t j = 0; j < n_tok[i]; ++j) {
      const int64_t p = pos0[i] + j;
      positions.push_back(p);
      rows.push_back(int64_t{tables[static_cast<size_t>(i)][static_cast<size_t>(p / bs)]} * bs + p % bs);
    }
  std::vector<double> inv_freq(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / n_rot);
  const auto bq = random_floats(static_cast<size_t>(n_q), 11), bk = random_floats(static_cast<size_t>(n_kv), 12);
  const auto bv = random_floats(static_cast<size_t>(n_kv), 16), qn = random_floats(static_cast<size_t>(head_dim), 17);
  const auto kn = random_floats(static_cast<size_t>(head_dim), 18);
  const int64_t n_ctx = c.decode_pos + 1;
  // History: every position before a sequence's first new token, through a
  // first qkv_store call of its own (each backend stores the same floats).
  std::vector<int64_t> hist_rows, hist_pos;
  for (int i = 0; i < 3; ++i)
    for (int64_t p = 0; p < pos0[i]; ++p) {
      hist_pos.push_back(p);
      hist_rows.push_back(int64_t{tables[static_cast<size_t>(i)][static_cast<size_t>(p / bs)]} * bs + p % bs);
    }
  const auto nh = static_cast<int64_t>(hist_rows.size());
  const ScratchNeeds needs{.n_tok = std::max(n, nh), .n_in_max = n_q, .n_ctx = n_ctx, .n_head = n_head,
                           .n_head_kv = n_head_kv, .head_dim = head_dim, .max_seqs = 3};
  auto q0 = random_floats(static_cast<size_t>(n * n_q), 13), k0 = random_floats(static_cast<size_t>(n * n_kv), 14);
  auto v0 = random_floats(static_cast<size_t>(n * n_kv), 15);
  auto hq = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_q), 19);
  auto hk = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_kv), 20);
  auto hv = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_kv), 21);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // One backend: the stores, then attention; returns q after RoPE and the output.
  auto run = [&](Backend& be, bool device, std::vector<float>& q_out, std::vector<float>& out) {
    be.reserve(needs);
    KvStore kv = be.create_kv(layout, n_blocks).value();
    auto buf = [&](const std::vector<float>& h) { return Dev(be, h); };
    auto store = [&](std::vector<float>& q, std::vector<float>& k, std::vector<float>& v, const std::vector<int64_t>& pos,
                     const std::vector<int64_t>& kv_rows, std::vector<float>* q_back) {
      const auto m = static_cast<int64_t>(pos.size());
      std::vector<float> cs(static_cast<size_t>(m * n_rot));
      if (m == 0) return;
      QkvStoreArgs a{.bq = bq.data(), .bk = bk.data(), .bv = bv.data(), .q_norm = qn.data(), .k_norm = kn.data(),
                     .norm_eps = 1e-6f, .n_tok = m, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                     .n_rot = n_rot, .rope = c.rope, .kv = &kv, .layer = 1, .kv_rows = kv_rows.data()};
      if (!device) {
        be.rope_tables(pos, inv_freq, 1.0, cs.data());
        a.q = q.data(), a.k = k.data(), a.v = v.data(), a.cos_sin = cs.data();
        be.qkv_store(a);
        if (q_back) *q_back = q;
        return;
      }
      Dev dq = buf(q), dk = buf(k), dv = buf(v), dcs(be, m * n_rot);
      be.rope_tables(pos, inv_freq, 1.0, dcs.p());
      a.q = dq.p(), a.k = dk.p(), a.v = dv.p(), a.cos_sin = dcs.p();
      be.qkv_store(a);
      if (q_back) *q_back = dq.host(be);
    };
    std::vector<float> q = q0, k = k0, v = v0, hq2 = hq, hk2 = hk, hv2 = hv;
    store(hq2, hk2, hv2, hist_pos, hist_rows, nullptr);
    store(q, k, v, positions, rows, &q_out);
    // Attention over q after RoPE (device buffers only on the GPU).
    out.assign(static_cast<size_t>(n * n_q), std::numeric_limits<float>::quiet_NaN());
    std::optional<Dev> dq, dout;
    if (device) dq.emplace(be, q_out), dout.emplace(be, n * n_q);
    float* qp = device ? dq->p() : q_out.data();
    float* op = device ? dout->p() : out.data();
    std::vector<AttentionSeq> seqs;
    int64_t t = 0;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back({.q = qp + t * n_q, .out = op + t * n_q, .n_tok = n_tok[i], .pos0 = pos0[i],
                      .block_table = tables[static_cast<size_t>(i)].data()});
      t += n_tok[i];
    }
    be.attention({.seqs = seqs, .kv = &kv, .layer = 1, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
                  .scale = scale, .window = c.window, .softcap = c.softcap});
    if (device) out = dout->host(be);
  };
  auto be = gpu();
  ReferenceBackend ref;
  std::vector<float> qa, a, qb, b;
  run(*be, true, qa, a);
  run(ref, false, qb, b);
  ASSERT_TRUE(all_finite(a));
  EXPECT_LT(nmse(qa.data(), qb.data(), qb.size()), 1e-11) << "q after bias, norm and RoPE";
  EXPECT_LT(nmse(a.data(), b.data(), b.size()), c.kv == KvDtype::kF32 ? 1e-10 : 1e-7);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention,
    ::testing::Values(AttnCase{KvDtype::kF32, 64, 0, 0.0f, RopeLayout::kNeox, 37, "f32_d64"},
                      AttnCase{KvDtype::kF16, 64, 0, 0.0f, RopeLayout::kAdjacent, 37, "f16_d64"},
                      AttnCase{KvDtype::kF16, 128, 0, 0.0f, RopeLayout::kNeox, 700, "f16_d128_long_split"},
                      AttnCase{KvDtype::kF32, 8, 0, 0.0f, RopeLayout::kAdjacent, 37, "f32_d8"},
                      AttnCase{KvDtype::kF16, 256, 24, 50.0f, RopeLayout::kNeox, 300, "f16_d256_window_softcap"},
                      AttnCase{KvDtype::kF32, 96, 0, 0.0f, RopeLayout::kNeox, 2000, "f32_d96_long_split"}),
    [](const auto& info) { return std::string(info.param.name); });

// Routed experts with a shared expert: against the reference, and a token's
// output the same bits alone as inside a batch routed elsewhere.
TEST(CudaExpertFfn, MatchesTheReferenceAndIsPerTokenDeterministic) {
  SKIP_WITHOUT_GPU();
  const int64_t n_expert = 6, n_used = 2, n_embd = 256, n_ff = 96, n_ff_sh = 160, n_tok = 9;
  std::vector<Matrix> mats;
  for (int64_t e = 0; e < n_expert; ++e) {
    mats.emplace_back(DType::kQ8_0, n_embd, n_ff, 20 + static_cast<uint32_t>(e));
    mats.emplace_back(DType::kQ8_0, n_embd, n_ff, 40 + static_cast<uint32_t>(e));
    mats.emplace_back(DType::kQ8_0, n_ff, n_embd, 60 + static_cast<uint32_t>(e));
  }
  mats.emplace_back(DType::kQ4_K, n_embd, n_ff_sh, 90);
  mats.emplace_back(DType::kQ4_K, n_embd, n_ff_sh, 91);
  mats.emplace_back(DType::kQ8_0, n_ff_sh, n_embd, 92);
  auto be = gpu();
  std::vector<WeightView*> views;
  for (Matrix& m : mats) views.push_back(&m.dev);
  auto prepared = to_device(*be, views);
  std::vector<ExpertWeights> host_experts, dev_experts;
  for (int64_t e = 0; e < n_expert; ++e) {
    const auto i = static_cast<size_t>(3 * e);
    host_experts.push_back({mats[i].host, mats[i + 1].host, mats[i + 2].host});
    dev_experts.push_back({mats[i].dev, mats[i + 1].dev, mats[i + 2].dev});
  }
  const ExpertWeights host_shared{mats[18].host, mats[19].host, mats[20].host};
  const ExpertWeights dev_shared{mats[18].dev, mats[19].dev, mats[20].dev};
  const auto x = random_floats(static_cast<size_t>(n_tok * n_embd), 70);
  const auto sgate = random_floats(static_cast<size_t>(n_embd), 71, 0.1f);
  std::vector<int32_t> ids(static_cast<size_t>(n_tok * n_used));
  std::vector<float> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 5 + i / 2) % n_expert);
    w[i] = 0.25f + 0.5f * static_cast<float>(i % 2);
  }
  const ScratchNeeds needs{.n_tok = n_tok, .n_in_max = n_ff_sh, .n_expert = n_expert, .n_used = n_used,
                           .n_ff_expert = n_ff, .n_ff_shared = n_ff_sh, .n_embd = n_embd};
  ReferenceBackend ref;
  ref.reserve(needs);
  be->reserve(needs);
  Dev dx(*be, x);
  auto run_gpu = [&](int64_t t0, int64_t nt) {
    Dev out(*be, nt * n_embd);
    be->expert_ffn({.x = dx.p() + t0 * n_embd, .out = out.p(), .ids = ids.data() + t0 * n_used,
                    .weights = w.data() + t0 * n_used, .n_tok = nt, .n_used = n_used, .n_embd = n_embd, .n_ff = n_ff,
                    .experts = dev_experts, .shared = &dev_shared, .n_ff_shared = n_ff_sh, .shared_gate = sgate.data()});
    return out.host(*be);
  };
  std::vector<float> b(static_cast<size_t>(n_tok * n_embd), std::numeric_limits<float>::quiet_NaN());
  ref.expert_ffn({.x = x.data(), .out = b.data(), .ids = ids.data(), .weights = w.data(), .n_tok = n_tok,
                  .n_used = n_used, .n_embd = n_embd, .n_ff = n_ff, .experts = host_experts, .shared = &host_shared,
                  .n_ff_shared = n_ff_sh, .shared_gate = sgate.data()});
  const auto a = run_gpu(0, n_tok);
  ASSERT_TRUE(all_finite(a));
  EXPECT_LT(nmse(a.data(), b.data(), a.size()), 2e-4);  // Q8_0 experts: 8-bit activations
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto one = run_gpu(t, 1);
    ASSERT_EQ(std::memcmp(one.data(), a.data() + t * n_embd, static_cast<size_t>(n_embd) * 4), 0) << "token " << t;
  }
}

TEST(CudaBackend, EmbedRouteAddRmsnormAndLogitsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const int64_t n_embd = 64, n_vocab = 96;
  Matrix table(DType::kQ8_0, n_embd, n_vocab, 80);
  auto be = gpu();
  auto prepared = to_device(*be, {&table.dev});  // the output head; the embedding stays on the host
  ReferenceBackend ref;
  const std::vector<int32_t> toks = {5, 95, 0, 5};
  const auto norm = random_floats(static_cast<size_t>(n_embd), 81);
  const auto y = random_floats(toks.size() * n_embd, 82);
  const int64_t rows[2] = {3, 1};
  be->reserve({.n_tok = 4, .n_in_max = n_embd});
  ref.reserve({.n_tok = 4, .n_in_max = n_embd});
  // Reference.
  std::vector<float> rx(toks.size() * n_embd), rxn(2 * n_embd), rl(2 * n_vocab), rn(rx.size());
  ref.embed(table.host, toks, 2.0f, rx.data());
  ref.add(rx.data(), y.data(), static_cast<int64_t>(rx.size()));
  ref.rmsnorm(rx.data(), norm.data(), 1e-5f, rn.data(), 4, n_embd);
  ref.logits({.x = rx.data(), .rows = rows, .n_out = 2, .norm = norm.data(), .eps = 1e-5f, .n_embd = n_embd,
              .xn = rxn.data(), .output = table.host, .logits = rl.data()});
  // GPU.
  Dev x(*be, static_cast<int64_t>(rx.size())), dy(*be, y), dn(*be, static_cast<int64_t>(rx.size())), xn(*be, 2 * n_embd);
  be->embed(table.host, toks, 2.0f, x.p());
  be->add(x.p(), dy.p(), static_cast<int64_t>(rx.size()));
  be->rmsnorm(x.p(), norm.data(), 1e-5f, dn.p(), 4, n_embd);
  std::vector<float> gl(2 * n_vocab, std::numeric_limits<float>::quiet_NaN());
  be->logits({.x = x.p(), .rows = rows, .n_out = 2, .norm = norm.data(), .eps = 1e-5f, .n_embd = n_embd,
              .xn = xn.p(), .output = table.dev, .logits = gl.data()});
  EXPECT_EQ(x.host(*be), rx);  // a dequantized row times 2, plus y: exact
  EXPECT_LT(nmse(dn.host(*be).data(), rn.data(), rn.size()), 1e-11);
  EXPECT_LT(nmse(gl.data(), rl.data(), rl.size()), 2e-4);  // a Q8_0 head: 8-bit activations
  // Routing reads the router's outputs from the device.
  const auto lg = random_floats(3 * 8, 83);
  Dev dlg(*be, lg);
  std::vector<int32_t> ia(6), ib(6);
  std::vector<float> wa(6), wb(6);
  be->route({.logits = dlg.p(), .n_tok = 3, .n_expert = 8, .n_used = 2, .ids = ia.data(), .weights = wa.data()});
  ref.route({.logits = lg.data(), .n_tok = 3, .n_expert = 8, .n_used = 2, .ids = ib.data(), .weights = wb.data()});
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(wa, wb);
}

TEST(CudaBackend, KvBlocksCopyAndSwapThroughTheHost) {
  SKIP_WITHOUT_GPU();
  auto be = gpu();
  const KvLayout layout{.n_layer = 2, .n_embd_kv = 64, .block_size = 16, .dtype = KvDtype::kF16, .n_head_kv = 2};
  KvStore dev = be->create_kv(layout, 4).value();
  KvStore host = KvStore::create(layout, 4).value();
  EXPECT_FALSE(dev.host_memory());
  const auto rowsf = random_floats(64, 5);
  host.store_row(rowsf.data(), host.k_layer(1), 16 + 3);   // block 1
  be->move_kv_block(host, 1, dev, 2);                      // swap in to block 2
  be->copy_kv_block(dev, 2, 0);                            // copy-on-write to block 0
  KvStore back = KvStore::create(layout, 4).value();
  be->move_kv_block(dev, 0, back, 3);                      // swap out to block 3
  std::vector<float> got(64);
  back.load_row(back.k_layer(1), 48 + 3, got.data());
  std::vector<float> want(64);
  host.load_row(host.k_layer(1), 16 + 3, want.data());
  EXPECT_EQ(got, want);
  // A KV dtype the kernels do not read is refused with a reason.
  const KvLayout q8{.n_layer = 1, .n_embd_kv = 64, .block_size = 16, .dtype = KvDtype::kQ8_0, .n_head_kv = 2};
  EXPECT_FALSE(be->create_kv(q8, 4).ok());
}

}  // namespace
}  // namespace sluice

#endif  // SLUICE_HAVE_CUDA
