// Prefill attention on the CUDA backend against the reference backend: one
// attention call over sequences of 512, 33, 16, 7 and 1 query tokens (the
// first two go to flash attention, cuda_flash_attn.cuh; the others to the
// per-query kernel), each after its own history in scrambled KV blocks.
// Variants: KV dtype, head size, GQA group, sliding window, soft-cap.
//
// Error bound. Flash attention rounds q and the probabilities (and K, V from
// an F32 store) to F16, 11 significant bits: ~2.4e-4 rms relative per value,
// so an output is off by ~3e-4 of its scale, a normalized squared error ~1e-7.
// kFlashNmse allows 100x that; a key wrongly in or out of a query's window
// costs ~1/(keys attended) of that query's output, which the first positions
// of a sequence (few keys) make large. Outputs are NaN-poisoned. Without a GPU
// every test skips.
#ifdef SLUICE_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_test_util.h"
#include "backend/reference_backend.h"
#include "kv/kv_store.h"

namespace sluice::cuda::testing {
namespace {


constexpr double kFlashNmse = 1e-5;

struct FlashCase {
  KvDtype kv;
  int64_t head_dim, n_head, n_head_kv, window;
  float softcap;
  const char* name;
};

class CudaFlashAttention : public ::testing::TestWithParam<FlashCase> {};

TEST_P(CudaFlashAttention, PrefillAttentionMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const FlashCase c = GetParam();
  const int64_t hd = c.head_dim, n_q = c.n_head * hd, n_kv = c.n_head_kv * hd, bs = 16;
  const KvLayout layout{.n_layer = 1, .n_embd_kv = n_kv, .block_size = bs, .dtype = c.kv, .n_head_kv = c.n_head_kv};
  // Sequences: first position, query tokens.
  const std::vector<int64_t> pos0 = {0, 70, 0, 5, 200}, n_tok = {512, 33, 16, 7, 1};
  const size_t n_seq = pos0.size();
  // Blocks of every sequence from one pool, handed out in scrambled order.
  int64_t n_blocks = 0;
  for (size_t i = 0; i < n_seq; ++i) n_blocks += (pos0[i] + n_tok[i] + bs - 1) / bs;
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  for (size_t i = 0; i < pool.size(); ++i) std::swap(pool[i], pool[(i * 7919 + 13) % pool.size()]);
  std::vector<std::vector<int32_t>> tables(n_seq);
  std::vector<int64_t> rows, positions;  // every stored position of every sequence
  size_t next = 0;
  for (size_t i = 0; i < n_seq; ++i) {
    const int64_t n_pos = pos0[i] + n_tok[i];
    for (int64_t b = 0; b < (n_pos + bs - 1) / bs; ++b) tables[i].push_back(pool[next++]);
    for (int64_t p = 0; p < n_pos; ++p) {
      positions.push_back(p);
      rows.push_back(int64_t{tables[i][static_cast<size_t>(p / bs)]} * bs + p % bs);
    }
  }
  const auto n_store = static_cast<int64_t>(rows.size());
  int64_t n_query = 0;
  for (int64_t t : n_tok) n_query += t;
  std::vector<double> inv_freq(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / hd);
  const auto k0 = random_floats(static_cast<size_t>(n_store * n_kv), 31), v0 = random_floats(k0.size(), 32);
  const auto q_all = random_floats(static_cast<size_t>(n_store * n_q), 33);  // only stored, not attended
  const auto q = random_floats(static_cast<size_t>(n_query * n_q), 34);      // the attention's queries
  const ScratchNeeds needs{.n_tok = n_store, .n_in_max = n_q, .n_ctx = 512, .n_head = c.n_head,
                           .n_head_kv = c.n_head_kv, .head_dim = hd, .max_seqs = static_cast<int64_t>(n_seq)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // One backend: store every position's K/V (RoPE on k), then attention.
  auto run = [&](Backend& be, bool device) {
    be.reserve(needs);
    KvStore kv = be.create_kv(layout, n_blocks).value();
    std::vector<float> qs = q_all, ks = k0, vs = v0, cs(static_cast<size_t>(n_store * hd));
    std::vector<float> out(q.size());
    QkvStoreArgs st{.n_tok = n_store, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = hd, .n_rot = hd,
                    .rope = RopeLayout::kNeox, .kv = &kv, .layer = 0, .kv_rows = rows.data()};
    std::vector<AttentionSeq> seqs;
    auto attend = [&](const float* qp, float* op) {
      int64_t t = 0;
      for (size_t i = 0; i < n_seq; ++i) {
        seqs.push_back({.q = qp + t * n_q, .out = op + t * n_q, .n_tok = n_tok[i], .pos0 = pos0[i],
                        .block_table = tables[i].data()});
        t += n_tok[i];
      }
      be.attention({.seqs = seqs, .kv = &kv, .layer = 0, .n_head = c.n_head, .n_head_kv = c.n_head_kv,
                    .head_dim = hd, .scale = scale, .window = c.window, .softcap = c.softcap});
    };
    if (!device) {
      be.rope_tables(positions, inv_freq, 1.0, cs.data());
      st.q = qs.data(), st.k = ks.data(), st.v = vs.data(), st.cos_sin = cs.data();
      be.qkv_store(st);
      attend(q.data(), out.data());
      return out;
    }
    Dev dq(be, qs), dk(be, ks), dv(be, vs), dcs(be, n_store * hd), dqa(be, q), dout(be, n_query * n_q);
    be.rope_tables(positions, inv_freq, 1.0, dcs.p());
    st.q = dq.p(), st.k = dk.p(), st.v = dv.p(), st.cos_sin = dcs.p();
    be.qkv_store(st);
    attend(dqa.p(), dout.p());
    return dout.host(be);
  };
  auto be = gpu();
  ReferenceBackend ref;
  const auto a = run(*be, true), b = run(ref, false);
  ASSERT_TRUE(all_finite(a));
  int64_t t = 0;
  for (size_t i = 0; i < n_seq; ++i) {
    const size_t off = static_cast<size_t>(t * n_q), n = static_cast<size_t>(n_tok[i] * n_q);
    const double e = nmse(a.data() + off, b.data() + off, n);
    std::printf("  %s: %lld queries at %lld: nmse %.2e\n", c.name, static_cast<long long>(n_tok[i]),
                static_cast<long long>(pos0[i]), e);
    // The per-query kernel keeps its float bounds (cuda_backend_test.cpp).
    const double bound = n_tok[i] >= 32 ? kFlashNmse : (c.kv == KvDtype::kF32 ? 1e-10 : 1e-7);
    EXPECT_LT(e, bound) << "sequence " << i << ": " << n_tok[i] << " queries from position " << pos0[i];
    t += n_tok[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaFlashAttention,
    ::testing::Values(FlashCase{KvDtype::kF16, 128, 8, 2, 0, 0.0f, "f16_d128_gqa4"},
                      FlashCase{KvDtype::kF32, 64, 4, 4, 0, 0.0f, "f32_d64"},
                      FlashCase{KvDtype::kF16, 96, 6, 2, 100, 0.0f, "f16_d96_window100"},
                      FlashCase{KvDtype::kF16, 64, 4, 2, 40, 0.0f, "f16_d64_window40"},
                      FlashCase{KvDtype::kF16, 128, 4, 1, 0, 30.0f, "f16_d128_mqa_softcap"},
                      FlashCase{KvDtype::kF16, 256, 4, 2, 0, 0.0f, "f16_d256_per_query_kernel"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sluice::cuda::testing

#endif  // SLUICE_HAVE_CUDA
