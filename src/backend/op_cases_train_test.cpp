// Op cases of the training operators (TrainOps, backend/train_ops.h) but
// attention: a bias added to rows (bit for bit: one float add each),
// forward_matmul (the products over a micro-batch where a backend has them),
// matmul_t for every weight type (odd n_in, past a 256-column
// block, a 256-row chunk and a 2048-row span, tokens past a 96-row block; one
// token and many; overwrite and accumulate), RMSNorm backward, RoPE on rows
// (both layouts, the inverse), GLU and its backward (SiLU, GELU), cross-entropy
// (ignored targets, vocabularies up to 151936), the LoRA factors' gradients
// (ranks 1 to 256) and AdamW.
//
// Tolerances (normalized squared error against the reference's double sums):
// matmul_t is one f32 FMA chain over n_out products of exactly dequantized
// weights, ~n_out * 2^-48; elementwise f32 work with a vector e^x of ~2 ulp
// lands near 1e-14, f32 sums over a few hundred tokens or a rank near 1e-12;
// the bounds leave two orders of magnitude or more. The forward GLU's scalar
// GELU takes 0.5 x (1 + tanh u) in f32: ~1e-5 relative where tanh u is near
// -1, which a one-element case sees whole (1e-8).
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "backend/op_cases.h"
#include "backend/rope_tables.h"

namespace sluice::op_cases {
namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

TrainOps& train(OpRun& r) { return *r.be().train_ops(); }

// dx = W^T dy (or +=) through a frozen matrix of `type`, prepared as the
// model prepares it (the repacked layouts) and as GGUF rows.
class MatmulTCase final : public OpCase {
 public:
  MatmulTCase(DType type, int64_t n_in, int64_t n_out, int64_t n_tok, bool accumulate)
      : type_(type), n_in_(n_in), n_out_(n_out), n_tok_(n_tok), accumulate_(accumulate),
        w_(type, n_in, n_out, 11, 0.1f), dy_(random_floats(sz(n_tok * n_out), 12)),
        init_(random_floats(sz(n_tok * n_in), 13)) {}
  static constexpr Op kOps[] = {Op::kMatmulT};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_}; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    const WeightView w = r.weights({w_.view})[0];
    train(r).reserve({.n_tok = n, .n_ctx = 1, .n_head = 1, .head_dim = 1, .n_in_max = n_in_});
    // A tensor-core path rounds dy and the weights to BF16, as a forward matmul of as many tokens rounds x.
    const Tol tol = Tol::nmse(train(r).matmul_t_rounds_to_bf16(type_, n) ? matmul_tolerance(type_, ActRounding::kBF16, 1)
                                                                         : 1e-9);
    float* dx = accumulate_ ? r.inout("dx", rows(init_, t0, n, n_in_), n_in_, tol) : r.out("dx", n, n_in_, tol);
    train(r).matmul_t({.w = w, .dy = r.in(rows(dy_, t0, n, n_out_)), .dx = dx, .n_tok = n, .accumulate = accumulate_});
  }

 private:
  DType type_;
  int64_t n_in_, n_out_, n_tok_;
  bool accumulate_;
  Matrix w_;
  std::vector<float> dy_, init_;
};

// y = W x over a micro-batch (forward_matmul), W in GGUF rows.
class ForwardMatmulCase final : public OpCase {
 public:
  ForwardMatmulCase(DType type, int64_t n_in, int64_t n_out, int64_t n_tok)
      : type_(type), n_in_(n_in), n_out_(n_out), n_tok_(n_tok), w_(type, n_in, n_out, 14, 0.1f),
        x_(random_floats(sz(n_tok * n_in), 15)) {}
  static constexpr Op kOps[] = {Op::kForwardMatmul};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_}; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    train(r).reserve({.n_tok = n, .n_ctx = 1, .n_head = 1, .head_dim = 1, .n_in_max = n_in_});
    train(r).forward_matmul({.w = r.weights({w_.view})[0], .x = r.in(rows(x_, t0, n, n_in_)),
                             .y = r.out("y", n, n_out_, Tol::nmse(1e-9)), .n_tok = n});
  }

 private:
  DType type_;
  int64_t n_in_, n_out_, n_tok_;
  Matrix w_;
  std::vector<float> x_;
};

// dx += the input gradient of RMSNorm with weights w.
class RmsnormBackwardCase final : public OpCase {
 public:
  RmsnormBackwardCase(int64_t n_tok, int64_t n)
      : n_tok_(n_tok), n_(n), x_(random_floats(sz(n_tok * n), 1)), w_(random_floats(sz(n), 2)),
        dy_(random_floats(sz(n_tok * n), 3)), dx0_(random_floats(sz(n_tok * n), 4)) {}
  static constexpr Op kOps[] = {Op::kRmsnormBackward};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    train(r).rmsnorm_backward({.x = r.in(rows(x_, t0, n, n_)), .w = r.in(w_), .dy = r.in(rows(dy_, t0, n, n_)),
                               .dx = r.inout("dx", rows(dx0_, t0, n, n_), n_, Tol::nmse(1e-11)), .n_tok = n,
                               .n = n_, .eps = 1e-5f});
  }

 private:
  int64_t n_tok_, n_;
  std::vector<float> x_, w_, dy_, dx0_;
};

// x[t] += v for every row (a frozen bias on a micro-batch).
class AddRowsCase final : public OpCase {
 public:
  AddRowsCase(int64_t n_tok, int64_t n)
      : n_tok_(n_tok), n_(n), x_(random_floats(sz(n_tok * n), 18)), v_(random_floats(sz(n), 19)) {}
  static constexpr Op kOps[] = {Op::kAddRows};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    train(r).add_rows({.x = r.inout("x", rows(x_, t0, n, n_), n_, Tol::bits()), .v = r.in(v_), .n_tok = n, .n = n_});
  }

 private:
  int64_t n_tok_, n_;
  std::vector<float> x_, v_;
};

// RoPE on plain rows at positions 1, 4, 7, ..., or its inverse.
class RopeCase final : public OpCase {
 public:
  RopeCase(int64_t n_tok, int64_t n_head, int64_t head_dim, int64_t n_rot, RopeLayout layout, bool inverse)
      : n_tok_(n_tok), n_head_(n_head), head_dim_(head_dim), n_rot_(n_rot), layout_(layout), inverse_(inverse),
        x_(random_floats(sz(n_tok * n_head * head_dim), 5)), cs_(sz(n_tok * n_rot)) {
    std::vector<int64_t> pos(sz(n_tok));
    for (int64_t t = 0; t < n_tok; ++t) pos[sz(t)] = 3 * t + 1;
    std::vector<double> inv_freq(sz(n_rot / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / n_rot);
    rope_cos_sin(pos, inv_freq, 1.0, cs_.data());
  }
  static constexpr Op kOps[] = {Op::kRope};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    const int64_t width = n_head_ * head_dim_;
    train(r).rope({.x = r.inout("x", rows(x_, t0, n, width), width, Tol::nmse(1e-12)),
                   .cos_sin = r.in(rows(cs_, t0, n, n_rot_)), .n_tok = n, .n_head = n_head_, .head_dim = head_dim_,
                   .n_rot = n_rot_, .layout = layout_, .inverse = inverse_});
  }

 private:
  int64_t n_tok_, n_head_, head_dim_, n_rot_;
  RopeLayout layout_;
  bool inverse_;
  std::vector<float> x_, cs_;
};

// h = act(g) * u, then the backward's dg and du from dh.
class GluCase final : public OpCase {
 public:
  GluCase(int64_t n_tok, int64_t n_ff, Activation act)
      : n_tok_(n_tok), n_ff_(n_ff), act_(act), g_(random_floats(sz(n_tok * n_ff), 6, 3.0f)),
        u_(random_floats(g_.size(), 7)), dh_(random_floats(g_.size(), 8)) {}
  static constexpr Op kOps[] = {Op::kGlu, Op::kGluBackward};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    const float* g = r.in(rows(g_, t0, n, n_ff_));
    const float* u = r.in(rows(u_, t0, n, n_ff_));
    train(r).glu({.g = g, .u = u, .h = r.out("h", n, n_ff_, Tol::nmse(1e-8)), .n_tok = n, .n_ff = n_ff_, .act = act_});
    train(r).glu_backward({.g = g, .u = u, .dh = r.in(rows(dh_, t0, n, n_ff_)),
                           .dg = r.out("dg", n, n_ff_, Tol::nmse(1e-11)), .du = r.out("du", n, n_ff_, Tol::nmse(1e-12)),
                           .n_tok = n, .n_ff = n_ff_, .act = act_});
  }

 private:
  int64_t n_tok_, n_ff_;
  Activation act_;
  std::vector<float> g_, u_, dh_;
};

// Cross-entropy in place over logits of a spread; target -1 is ignored.
// Deferred: the rows in two calls whose losses finish_losses() writes.
class CrossEntropyCase final : public OpCase {
 public:
  CrossEntropyCase(int64_t n_vocab, std::vector<int32_t> targets, float spread, bool deferred = false)
      : n_vocab_(n_vocab), targets_(std::move(targets)),
        z_(random_floats(targets_.size() * sz(n_vocab), 9, spread)), deferred_(deferred) {}
  static constexpr Op kOps[] = {Op::kCrossEntropy};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return static_cast<int64_t>(targets_.size()); }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    // The gradient's scale is the whole case's 1 / tokens, so a token alone gives its row of the batch.
    float* z = r.inout("dz", rows(z_, t0, n, n_vocab_), n_vocab_, Tol::nmse(1e-11));
    double* loss = r.host_doubles("loss", n, 1, Tol::nmse(1e-13));
    const float scale = 1.0f / static_cast<float>(targets_.size());
    if (!deferred_) {
      train(r).cross_entropy({.logits = z, .targets = targets_.data() + t0, .loss = loss, .n_tok = n,
                              .n_vocab = n_vocab_, .grad_scale = scale});
      return;
    }
    const int64_t half = n / 2;
    for (const auto& [a, b] : {std::pair{int64_t{0}, half}, std::pair{half, n}}) {
      train(r).cross_entropy({.logits = z + a * n_vocab_, .targets = targets_.data() + t0 + a, .loss = loss + a,
                              .n_tok = b - a, .n_vocab = n_vocab_, .grad_scale = scale, .deferred = true});
    }
    train(r).finish_losses();
  }

 private:
  int64_t n_vocab_;
  std::vector<int32_t> targets_;
  std::vector<float> z_;
  bool deferred_;
};

// dA, dB (and dx unless with_dx is false) of a low-rank term at scale 0.75.
class LoraBackwardCase final : public OpCase {
 public:
  LoraBackwardCase(int64_t n_tok, int64_t n_in, int64_t n_out, int64_t rank, bool with_dx)
      : n_tok_(n_tok), n_in_(n_in), n_out_(n_out), rank_(rank), with_dx_(with_dx),
        x_(random_floats(sz(n_tok * n_in), 10)), dy_(random_floats(sz(n_tok * n_out), 11)),
        a_(random_floats(sz(rank * n_in), 12, 0.1f)), b_(random_floats(sz(n_out * rank), 13, 0.1f)),
        u_(random_floats(sz(n_tok * rank), 14)), da_(random_floats(a_.size(), 15)), db_(random_floats(b_.size(), 16)),
        dx_(random_floats(x_.size(), 17)) {}
  static constexpr Op kOps[] = {Op::kLoraBackward};
  std::span<const Op> ops() const override { return kOps; }
  void run(OpRun& r, int64_t, int64_t) override {
    train(r).reserve({.n_tok = n_tok_, .n_in_max = std::max(n_in_, n_out_)});
    const Tol tol = Tol::nmse(1e-10);
    // Without an input gradient dx is still declared: it must keep its values.
    float* dx = r.inout("dx", dx_, n_in_, with_dx_ ? tol : Tol::bits());
    train(r).lora_backward({.x = r.in(x_), .u = r.in(u_), .dy = r.in(dy_), .a = r.in(a_), .b = r.in(b_),
                            .da = r.inout("da", da_, n_in_, tol), .db = r.inout("db", db_, rank_, tol),
                            .dx = with_dx_ ? dx : nullptr, .n_tok = n_tok_, .n_in = n_in_, .n_out = n_out_,
                            .rank = rank_, .scale = 0.75f});
  }

 private:
  int64_t n_tok_, n_in_, n_out_, rank_;
  bool with_dx_;
  std::vector<float> x_, dy_, a_, b_, u_, da_, db_, dx_;
};

// One AdamW update of n parameters at a step, with weight decay.
class AdamWCase final : public OpCase {
 public:
  AdamWCase(int64_t n, int64_t step, float weight_decay)
      : n_(n), step_(step), weight_decay_(weight_decay), g_(random_floats(sz(n), 18)), p_(random_floats(sz(n), 19)),
        m_(random_floats(sz(n), 20, 0.1f)), v_(random_floats(sz(n), 21, 0.1f)) {
    for (float& x : v_) x = x * x;
  }
  static constexpr Op kOps[] = {Op::kAdamW};
  std::span<const Op> ops() const override { return kOps; }
  void run(OpRun& r, int64_t, int64_t) override {
    const Tol tol = Tol::nmse(1e-13);
    train(r).adamw({.p = r.inout("p", p_, n_, tol), .g = r.in(g_), .m = r.inout("m", m_, n_, tol),
                    .v = r.inout("v", v_, n_, tol), .n = n_, .step = step_, .lr = 1e-2f,
                    .weight_decay = weight_decay_});
  }

 private:
  int64_t n_, step_;
  float weight_decay_;
  std::vector<float> g_, p_, m_, v_;
};

std::string dims(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

void add_matmul_t(OpCaseList& list, DType t, int64_t n_in, int64_t n_out, int64_t n_tok, bool acc = false) {
  add<MatmulTCase>(list, "matmul_t_" + std::string(dtype_name(t)) + "_" + dims(n_in, n_out) + "_t" +
                             std::to_string(n_tok) + (acc ? "_acc" : ""),
                   t, n_in, n_out, n_tok, acc);
}

}  // namespace

void add_train_cases(OpCaseList& list) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    add_matmul_t(list, t, 37, 45, 7);    // odd n_in
    add_matmul_t(list, t, 300, 300, 1);  // one token
    add_matmul_t(list, t, 517, 19, 97, true);  // two column blocks
  }
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL}) {
    add_matmul_t(list, t, 32, 7, 1);            // one block
    add_matmul_t(list, t, 320, 300, 13);        // a partial column block
    add_matmul_t(list, t, 544, 45, 97, true);   // many tokens
  }
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS}) {
    add_matmul_t(list, t, 256, 33, 5);          // one block
    add_matmul_t(list, t, 768, 261, 103, true); // three column blocks
  }
  add_matmul_t(list, DType::kQ8_0, 64, 2100, 13);       // past one k span
  add_matmul_t(list, DType::kF16, 40, 2100, 7, true);
  // Shapes a tensor-core path takes (rows and columns multiples of 8, 16 or
  // more tokens for BF16, 32 or more for the rest): CUDA's run_t.
  add_matmul_t(list, DType::kBF16, 64, 48, 33, true);
  add_matmul_t(list, DType::kF16, 96, 40, 40);
  add_matmul_t(list, DType::kQ4_0, 256, 64, 40, true);
  add_matmul_t(list, DType::kQ8_0, 128, 24, 33);
  add_matmul_t(list, DType::kQ4_K, 512, 24, 33, true);
  add_matmul_t(list, DType::kQ6_K, 256, 16, 64);

  // forward_matmul: odd n_in, one token, past a 96-row block, a 256-column
  // block and a 2048-row span of k.
  for (auto [n_in, n_out, n_tok] : {std::array<int64_t, 3>{37, 45, 7}, {300, 300, 1}, {517, 19, 97}, {64, 300, 100},
                                    {2100, 40, 13}}) {
    add<ForwardMatmulCase>(list, "forward_matmul_f32_" + dims(n_in, n_out) + "_t" + std::to_string(n_tok), DType::kF32,
                           n_in, n_out, n_tok);
  }

  add<AddRowsCase>(list, "add_rows_1x1", int64_t{1}, int64_t{1});
  add<AddRowsCase>(list, "add_rows_70x300", int64_t{70}, int64_t{300});
  add<RmsnormBackwardCase>(list, "rmsnorm_backward_1x1", int64_t{1}, int64_t{1});
  add<RmsnormBackwardCase>(list, "rmsnorm_backward_3x37", int64_t{3}, int64_t{37});
  add<RmsnormBackwardCase>(list, "rmsnorm_backward_70x288", int64_t{70}, int64_t{288});

  struct RopeRow {
    const char* name;
    int64_t n_tok, n_head, head_dim, n_rot;
    RopeLayout layout;
    bool inverse;
  };
  for (const RopeRow& c : {RopeRow{"adjacent", 5, 3, 16, 16, RopeLayout::kAdjacent, false},
                           RopeRow{"adjacent_inverse", 5, 3, 16, 16, RopeLayout::kAdjacent, true},
                           RopeRow{"neox_partial", 7, 2, 64, 24, RopeLayout::kNeox, false},
                           RopeRow{"neox_partial_inverse", 7, 2, 64, 24, RopeLayout::kNeox, true},
                           RopeRow{"odd_pairs_inverse", 1, 4, 20, 10, RopeLayout::kAdjacent, true},
                           RopeRow{"odd_pairs_neox_inverse", 33, 1, 10, 10, RopeLayout::kNeox, true}})
    add<RopeCase>(list, std::string("rope_rows_") + c.name, c.n_tok, c.n_head, c.head_dim, c.n_rot, c.layout,
                  c.inverse);

  for (Activation act : {Activation::kSilu, Activation::kGelu}) {
    const std::string a = act == Activation::kGelu ? "gelu" : "silu";
    add<GluCase>(list, "glu_" + a + "_1x1", int64_t{1}, int64_t{1}, act);
    add<GluCase>(list, "glu_" + a + "_3x37", int64_t{3}, int64_t{37}, act);
    add<GluCase>(list, "glu_" + a + "_9x5000", int64_t{9}, int64_t{5000}, act);  // chunks
  }

  add<CrossEntropyCase>(list, "cross_entropy_v1", int64_t{1}, std::vector<int32_t>{0}, 1.0f);
  add<CrossEntropyCase>(list, "cross_entropy_v10_ignored", int64_t{10}, std::vector<int32_t>{3, -1, 9}, 2.0f);
  add<CrossEntropyCase>(list, "cross_entropy_v1001", int64_t{1001}, std::vector<int32_t>{0, 1000, 17, -1, 500}, 4.0f);
  add<CrossEntropyCase>(list, "cross_entropy_v1001_deferred", int64_t{1001},
                        std::vector<int32_t>{0, 1000, 17, -1, 500, 3, 999}, 4.0f, true);
  add<CrossEntropyCase>(list, "cross_entropy_v4099_wide", int64_t{4099}, std::vector<int32_t>{4098, 2}, 30.0f);
  add<CrossEntropyCase>(list, "cross_entropy_v151936", int64_t{151936}, std::vector<int32_t>{151935, 7, -1, 100000},
                        3.0f);

  // [n_tok, n_in, n_out, rank]
  add<LoraBackwardCase>(list, "lora_backward_tiny", int64_t{4}, int64_t{6}, int64_t{5}, int64_t{3}, true);
  add<LoraBackwardCase>(list, "lora_backward_rank1_t1", int64_t{1}, int64_t{64}, int64_t{64}, int64_t{1}, true);
  add<LoraBackwardCase>(list, "lora_backward_odd", int64_t{97}, int64_t{300}, int64_t{129}, int64_t{16}, true);
  add<LoraBackwardCase>(list, "lora_backward_rank256", int64_t{7}, int64_t{100}, int64_t{70}, int64_t{256}, true);
  add<LoraBackwardCase>(list, "lora_backward_no_dx", int64_t{50}, int64_t{288}, int64_t{288}, int64_t{8}, false);
  add<LoraBackwardCase>(list, "lora_backward_past_k_chunk", int64_t{300}, int64_t{40}, int64_t{33}, int64_t{4}, true);

  add<AdamWCase>(list, "adamw_1", int64_t{1}, int64_t{1}, 0.0f);
  add<AdamWCase>(list, "adamw_40001_decay", int64_t{40001}, int64_t{1}, 0.1f);
  add<AdamWCase>(list, "adamw_77_step10", int64_t{77}, int64_t{10}, 0.01f);
}

}  // namespace sluice::op_cases
