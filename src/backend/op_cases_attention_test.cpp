// Op cases of RoPE and attention: rope_tables, and qkv_store (bias, q/k norms,
// RoPE, the K/V rows into the store) followed by paged attention, over three
// sequences on scrambled blocks (one decoding, two prefilling), for each KV
// dtype and for head sizes, windows, soft-caps, RoPE layouts, long decodes
// that split the keys, and a prefill-size first sequence (AttnShape::prefill_tok).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

// cos_sin for positions, as every backend must compute them (rope_tables.h).
class RopeTablesCase final : public OpCase {
 public:
  RopeTablesCase(std::vector<int64_t> positions, int64_t n_rot, double base, double magnitude)
      : positions_(std::move(positions)), magnitude_(magnitude), inv_freq_(static_cast<size_t>(n_rot / 2)) {
    for (size_t i = 0; i < inv_freq_.size(); ++i)
      inv_freq_[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  }
  static constexpr Op kOps[] = {Op::kRopeTables};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return static_cast<int64_t>(positions_.size()); }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    const auto n_rot = static_cast<int64_t>(2 * inv_freq_.size());
    r.be().rope_tables(rows(positions_, t0, n), inv_freq_,
                       magnitude_, r.out("cos_sin", n, n_rot, Tol::bits()));
  }

 private:
  std::vector<int64_t> positions_;
  double magnitude_;
  std::vector<double> inv_freq_;
};

struct AttnShape {
  KvDtype kv;
  int64_t head_dim;
  int64_t window;      // 0: none
  float softcap;       // 0: none
  RopeLayout rope;
  int64_t decode_pos;  // the decoding sequence's position
  bool full_qkv;       // v bias and q/k norms too; history through qkv_store at its positions
  double out_nmse;     // the attention output's tolerance
  int64_t prefill_tok = 20;  // the first sequence's new tokens, from position 0 (a prefill)
};

// Sequence i: n_tok[i] new tokens at pos0[i]; the blocks taken from a
// reversed pool. History (every position before a sequence's first new
// token) goes in first: with full_qkv through a qkv_store call at its own
// positions, else stored as it is (a qkv_store at position 0, no bias: RoPE by
// angle 0 leaves the rows unchanged). Each backend gets its own store.
class AttentionCase final : public OpCase {
 public:
  explicit AttentionCase(const AttnShape& s) : s_(s) {
    n_q_ = kHead * s.head_dim, n_kv_ = kHeadKv * s.head_dim;
    pos0_[1] = s.decode_pos;
    new_tok_[0] = s.prefill_tok;
    const int64_t dec_blocks = (s.decode_pos + 1 + kBs - 1) / kBs;
    const int64_t pre_blocks = (s.prefill_tok + kBs - 1) / kBs;
    n_blocks_ = dec_blocks + pre_blocks + 2;
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks_));
    std::iota(pool.begin(), pool.end(), 0);
    std::reverse(pool.begin(), pool.end());
    tables_ = {std::vector<int32_t>(pool.begin(), pool.begin() + pre_blocks), {}, {pool[static_cast<size_t>(pre_blocks)]}};
    for (int64_t b = 0; b < dec_blocks; ++b) tables_[1].push_back(pool[static_cast<size_t>(pre_blocks + 1 + b)]);
    for (int i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < new_tok_[i]; ++j) {
        positions_.push_back(pos0_[i] + j);
        rows_.push_back(row(i, pos0_[i] + j));
      }
      for (int64_t p = 0; p < pos0_[i]; ++p) {
        hist_at_.push_back(p);
        hist_pos_.push_back(s.full_qkv ? p : 0);
        hist_rows_.push_back(row(i, p));
      }
    }
    n_ = static_cast<int64_t>(rows_.size());
    const auto nh = static_cast<int64_t>(hist_rows_.size());
    inv_freq_.resize(static_cast<size_t>(s.head_dim / 2));
    for (size_t i = 0; i < inv_freq_.size(); ++i)
      inv_freq_[i] = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
    bq_ = random_floats(static_cast<size_t>(n_q_), 11), bk_ = random_floats(static_cast<size_t>(n_kv_), 12);
    if (s.full_qkv) {
      bv_ = random_floats(static_cast<size_t>(n_kv_), 16);
      qn_ = random_floats(static_cast<size_t>(s.head_dim), 17), kn_ = random_floats(static_cast<size_t>(s.head_dim), 18);
    }
    q_ = random_floats(static_cast<size_t>(n_ * n_q_), 13), k_ = random_floats(static_cast<size_t>(n_ * n_kv_), 14);
    v_ = random_floats(static_cast<size_t>(n_ * n_kv_), 15);
    hq_ = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_q_), 19);
    if (s.full_qkv) {
      hk_ = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_kv_), 20);
      hv_ = random_floats(static_cast<size_t>(std::max<int64_t>(nh, 1) * n_kv_), 21);
    } else {  // one row per position, the same for K and V and for every sequence
      for (int64_t p : hist_at_) {
        const auto row = random_floats(static_cast<size_t>(n_kv_), 100 + static_cast<uint32_t>(p));
        hk_.insert(hk_.end(), row.begin(), row.end());
      }
      hv_ = hk_;
    }
  }

  static constexpr Op kOps[] = {Op::kRopeTables, Op::kQkvStore, Op::kAttention};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.kv = s_.kv}; }

  void run(OpRun& r, int64_t, int64_t) override {
    Backend& be = r.be();
    const auto nh = static_cast<int64_t>(hist_rows_.size());
    be.reserve({.n_tok = std::max(n_, nh), .n_in_max = n_q_, .n_ctx = std::max(s_.decode_pos + 1, s_.prefill_tok),
                .n_head = kHead, .n_head_kv = kHeadKv, .head_dim = s_.head_dim, .max_seqs = 3});
    const KvLayout layout{.n_layer = 2, .n_embd_kv = n_kv_, .block_size = kBs, .dtype = s_.kv, .n_head_kv = kHeadKv};
    KvStore& kv = r.kv(layout, n_blocks_);
    auto store = [&](float* q, float* k, float* v, const std::vector<int64_t>& pos, const std::vector<int64_t>& rows,
                     bool with_bias) {
      const auto m = static_cast<int64_t>(pos.size());
      if (m == 0) return;
      const std::vector<float> zeros(static_cast<size_t>(m * s_.head_dim));
      float* cs = r.in(zeros);
      be.rope_tables(pos, inv_freq_, 1.0, cs);
      be.qkv_store({.q = q, .k = k, .v = v, .bq = with_bias ? bq_.data() : nullptr,
                    .bk = with_bias ? bk_.data() : nullptr, .bv = bv_.empty() ? nullptr : bv_.data(),
                    .q_norm = qn_.empty() ? nullptr : qn_.data(), .k_norm = kn_.empty() ? nullptr : kn_.data(),
                    .norm_eps = 1e-6f, .cos_sin = cs, .n_tok = m, .n_head = kHead, .n_head_kv = kHeadKv,
                    .head_dim = s_.head_dim, .n_rot = s_.head_dim, .rope = s_.rope, .kv = &kv, .layer = 1,
                    .kv_rows = rows.data()});
    };
    store(r.in(hq_), r.in(hk_), r.in(hv_), hist_pos_, hist_rows_, s_.full_qkv);
    float* q = r.inout("q", q_, n_q_, Tol::nmse(1e-11));  // after bias, norm and RoPE
    store(q, r.in(k_), r.in(v_), positions_, rows_, true);
    // A backend whose attention rounds its operands at this many new tokens of
    // one sequence (CUDA's flash attention) is held to F16's rounding instead.
    const int64_t most_new = *std::max_element(std::begin(new_tok_), std::end(new_tok_));
    const bool f16 = be.attention_rounding(s_.head_dim, most_new) == AttnRounding::kF16;
    float* out = r.out("out", n_, n_q_, Tol::nmse(f16 ? std::max(s_.out_nmse, kF16OperandsNmse) : s_.out_nmse));
    std::vector<AttentionSeq> seqs;
    for (int64_t i = 0, t = 0; i < 3; t += new_tok_[i], ++i)
      seqs.push_back({.q = q + t * n_q_, .out = out + t * n_q_, .n_tok = new_tok_[i], .pos0 = pos0_[i],
                      .block_table = tables_[static_cast<size_t>(i)].data()});
    be.attention({.seqs = seqs, .kv = &kv, .layer = 1, .n_head = kHead, .n_head_kv = kHeadKv,
                  .head_dim = s_.head_dim, .scale = 1.0f / std::sqrt(static_cast<float>(s_.head_dim)),
                  .window = s_.window, .softcap = s_.softcap});
  }

 private:
  static constexpr int64_t kHead = 8, kHeadKv = 2, kBs = 16;
  // q, k, v and the probabilities each rounded to F16 (2^-11 relative).
  static constexpr double kF16OperandsNmse = 1e-6;
  int64_t new_tok_[3] = {20, 1, 9};  // per sequence: prefilling, decoding, prefilling on history
  int64_t row(int i, int64_t p) const {
    return int64_t{tables_[static_cast<size_t>(i)][static_cast<size_t>(p / kBs)]} * kBs + p % kBs;
  }

  AttnShape s_;
  int64_t n_q_, n_kv_, n_blocks_, n_ = 0;
  int64_t pos0_[3] = {0, 0, 5};
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> positions_, rows_;
  std::vector<int64_t> hist_at_, hist_pos_, hist_rows_;  // history: position, position RoPE'd at, row
  std::vector<double> inv_freq_;
  std::vector<float> bq_, bk_, bv_, qn_, kn_, q_, k_, v_, hq_, hk_, hv_;
};

}  // namespace

void add_attention_cases(OpCaseList& list) {
  add<RopeTablesCase>(list, "rope_tables_d64", std::vector<int64_t>{0, 1, 37, 5000, 131071}, int64_t{64}, 10000.0, 1.0);
  add<RopeTablesCase>(list, "rope_tables_d128_scaled", std::vector<int64_t>{3, 4095, 4096, 70000}, int64_t{128},
                      500000.0, 1.19);
  // Stored history, bias on q and k: each KV dtype.
  for (KvDtype kv : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0})
    add<AttentionCase>(list, std::string("attention_") + kv_dtype_name(kv) + "_d64",
                       AttnShape{kv, 64, 0, 0.0f, RopeLayout::kNeox, 37, false, 1e-9});
  // Every input of qkv_store; head sizes, windows, soft-caps, split keys.
  const AttnShape full[] = {
      {KvDtype::kF32, 64, 0, 0.0f, RopeLayout::kNeox, 37, true, 1e-10},
      {KvDtype::kF16, 64, 0, 0.0f, RopeLayout::kAdjacent, 37, true, 1e-7},
      {KvDtype::kF16, 128, 0, 0.0f, RopeLayout::kNeox, 700, true, 1e-7},
      {KvDtype::kF32, 8, 0, 0.0f, RopeLayout::kAdjacent, 37, true, 1e-10},
      {KvDtype::kF16, 256, 24, 50.0f, RopeLayout::kNeox, 300, true, 1e-7},
      {KvDtype::kF32, 96, 0, 0.0f, RopeLayout::kNeox, 2000, true, 1e-10},
  };
  const char* names[] = {"f32_d64", "f16_d64_adjacent", "f16_d128_long_split", "f32_d8_adjacent",
                         "f16_d256_window_softcap", "f32_d96_long_split"};
  for (size_t i = 0; i < std::size(full); ++i) add<AttentionCase>(list, std::string("qkv_attention_") + names[i], full[i]);
  // A prefill-size first sequence beside the decode.
  add<AttentionCase>(list, "qkv_attention_f16_d128_prefill" + std::to_string(kPrefillTokens),
                     AttnShape{KvDtype::kF16, 128, 0, 0.0f, RopeLayout::kNeox, 300, true, 1e-7, kPrefillTokens});
  add<AttentionCase>(list, "qkv_attention_f32_d64_window_prefill" + std::to_string(kPrefillTokens),
                     AttnShape{KvDtype::kF32, 64, 40, 0.0f, RopeLayout::kNeox, 37, true, 1e-10, kPrefillTokens});
}

}  // namespace sluice::op_cases
