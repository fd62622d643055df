// Op cases of the matmul-like operators: embed, matmul, norm_matmul,
// glu_matmul (SwiGLU, GeGLU) and logits, for every weight type; lora.
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

// x -> norm_matmul(norm; [small,] gate, up) -> glu_matmul(act; down): the FFN
// of a layer. An odd-sized first part (n_small rows) shares the dispatch, as
// q/k/v parts of different widths do.
class NormGluCase final : public OpCase {
 public:
  NormGluCase(DType type, int64_t n_embd, int64_t n_ff, int64_t n_tok, Activation act, int64_t n_small)
      : type_(type), n_embd_(n_embd), n_ff_(n_ff), n_tok_(n_tok), n_small_(n_small), act_(act),
        gate_(type, n_embd, n_ff, 1), up_(type, n_embd, n_ff, 2), down_(type, n_ff, n_embd, 3),
        small_(type, n_embd, std::max<int64_t>(n_small, 1), 6),
        x_(random_floats(static_cast<size_t>(n_tok * n_embd), 4)), norm_(random_floats(static_cast<size_t>(n_embd), 5)) {}

  static constexpr Op kOps[] = {Op::kNormMatmul, Op::kGluMatmul};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_, .act = act_}; }
  int64_t n_tok() const override { return n_tok_; }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = n_tok_, .n_in_max = n_ff_});
    const double d1 = matmul_tolerance(type_, r.rounding(type_, n), 1);
    const double d2 = matmul_tolerance(type_, r.rounding(type_, n), 2);
    auto gu = n_small_ > 0 ? r.weights({small_.view, gate_.view, up_.view}) : r.weights({gate_.view, up_.view});
    const WeightView down = r.weights({down_.view})[0];
    const float* x = r.in(rows(x_, t0, n, n_embd_));
    float* xn = r.out("xn", n, n_embd_, Tol::nmse(1e-11));
    float* g = r.out("h", n, n_ff_, Tol::written());  // gate, then act(gate) * up
    float* u = r.out("up", n, n_ff_, Tol::nmse(d1));
    float* y = r.out("y", n, n_embd_, Tol::nmse(d2));
    std::vector<MatmulOut> outs;
    if (n_small_ > 0) outs.push_back({gu[0], r.out("small", n, n_small_, Tol::nmse(d1))});
    outs.push_back({gu[outs.size()], g});
    outs.push_back({gu[outs.size()], u});
    r.be().norm_matmul({.x = x, .norm = norm_.data(), .eps = 1e-5f, .xn = xn, .n_embd = n_embd_, .n_tok = n, .outs = outs});
    r.snapshot("gate", g, n, n_ff_, Tol::nmse(d1));
    r.be().glu_matmul({.gate = g, .up = u, .n_ff = n_ff_, .n_tok = n, .act = act_, .out = {down, y}});
  }

 private:
  DType type_;
  int64_t n_embd_, n_ff_, n_tok_, n_small_;
  Activation act_;
  Matrix gate_, up_, down_, small_;
  std::vector<float> x_, norm_;
};

// glu_matmul alone, on gate values wide enough to reach GELU's tails.
class GluMatmulCase final : public OpCase {
 public:
  GluMatmulCase(DType type, int64_t n_embd, int64_t n_ff, int64_t n_tok, Activation act)
      : type_(type), n_embd_(n_embd), n_ff_(n_ff), n_tok_(n_tok), act_(act), down_(type, n_ff, n_embd, 11),
        gate_(random_floats(static_cast<size_t>(n_tok * n_ff), 12, 3.0f)),
        up_(random_floats(static_cast<size_t>(n_tok * n_ff), 13)) {}

  static constexpr Op kOps[] = {Op::kGluMatmul};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_, .act = act_}; }
  int64_t n_tok() const override { return n_tok_; }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = n_tok_, .n_in_max = n_ff_});
    const WeightView down = r.weights({down_.view})[0];
    float* h = r.inout("h", rows(gate_, t0, n, n_ff_), n_ff_, Tol::nmse(1e-11));
    float* y = r.out("y", n, n_embd_, Tol::nmse(matmul_tolerance(type_, r.rounding(type_, n), 2)));
    r.be().glu_matmul({.gate = h, .up = r.in(rows(up_, t0, n, n_ff_)), .n_ff = n_ff_, .n_tok = n, .act = act_, .out = {down, y}});
  }

 private:
  DType type_;
  int64_t n_embd_, n_ff_, n_tok_;
  Activation act_;
  Matrix down_;
  std::vector<float> gate_, up_;
};

// One matmul; with many tokens, so the per-token check sees every tile shape.
class MatmulCase final : public OpCase {
 public:
  MatmulCase(DType type, int64_t n_in, int64_t n_out, int64_t n_tok)
      : type_(type), n_in_(n_in), n_out_(n_out), n_tok_(n_tok), w_(type, n_in, n_out, 7),
        x_(random_floats(static_cast<size_t>(n_tok * n_in), 8)) {}

  static constexpr Op kOps[] = {Op::kMatmul};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_}; }
  int64_t n_tok() const override { return n_tok_; }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = n_tok_, .n_in_max = n_in_});
    const WeightView w = r.weights({w_.view})[0];
    const float* x = r.in(rows(x_, t0, n, n_in_));
    const MatmulOut o[1] = {{w, r.out("y", n, n_out_, Tol::nmse(matmul_tolerance(type_, r.rounding(type_, n), 1)))}};
    r.be().matmul(o, x, n_in_, n);
  }

 private:
  DType type_;
  int64_t n_in_, n_out_, n_tok_;
  Matrix w_;
  std::vector<float> x_;
};

// Rows of the embedding table, scaled: exact (a dequantized row times a scale).
class EmbedCase final : public OpCase {
 public:
  EmbedCase(DType type, int64_t n_embd, int64_t n_vocab, std::vector<int32_t> tokens)
      : type_(type), n_embd_(n_embd), table_(type, n_embd, n_vocab, 80), tokens_(std::move(tokens)) {}

  static constexpr Op kOps[] = {Op::kEmbed};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_}; }
  int64_t n_tok() const override { return static_cast<int64_t>(tokens_.size()); }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = n_tok(), .n_in_max = n_embd_});
    // The table is not prepared: the model keeps it where it is (a row per token is read).
    r.be().embed(table_.view, rows(tokens_, t0, n), 2.0f,
                 r.out("x", n, n_embd_, Tol::bits()));
  }

 private:
  DType type_;
  int64_t n_embd_;
  Matrix table_;
  std::vector<int32_t> tokens_;
};

// Logits of chosen rows of the hidden states: rows of the table times 2
// (what embed gives), plus a residual when `residual`.
class LogitsCase final : public OpCase {
 public:
  LogitsCase(DType type, int64_t n_embd, int64_t n_vocab, bool residual)
      : type_(type), n_embd_(n_embd), n_vocab_(n_vocab), head_(type, n_embd, n_vocab, 80),
        norm_(random_floats(static_cast<size_t>(n_embd), 81)) {
    const int32_t toks[4] = {5, 95 % static_cast<int32_t>(n_vocab), 0, 5};
    const auto y = random_floats(4 * static_cast<size_t>(n_embd), 82);
    x_.resize(4 * static_cast<size_t>(n_embd));
    for (size_t t = 0; t < 4; ++t) {
      dequantize_row(type, head_.bytes.data() + static_cast<size_t>(toks[t]) * row_bytes(type, n_embd),
                     x_.data() + t * static_cast<size_t>(n_embd), n_embd);
      for (size_t i = 0; i < static_cast<size_t>(n_embd); ++i) {
        float& v = x_[t * static_cast<size_t>(n_embd) + i];
        v = v * 2.0f + (residual ? y[t * static_cast<size_t>(n_embd) + i] : 0.0f);
      }
    }
  }

  static constexpr Op kOps[] = {Op::kLogits};
  std::span<const Op> ops() const override { return kOps; }
  OpTypes types() const override { return {.weight = type_}; }
  int64_t n_tok() const override { return 2; }  // the rows asked for

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = 4, .n_in_max = n_embd_});
    const WeightView head = r.weights({head_.view})[0];
    const std::vector<float> scratch(static_cast<size_t>(n * n_embd_));
    r.be().logits({.x = r.in(x_), .rows = kRows + t0, .n_out = n, .norm = norm_.data(), .eps = 1e-5f,
                   .n_embd = n_embd_, .xn = r.in(scratch), .output = head,
                   .logits = r.host_out("logits", n, n_vocab_,
                                        Tol::nmse(matmul_tolerance(type_, r.rounding(type_, n), 1)))});
  }

 private:
  static constexpr int64_t kRows[2] = {3, 1};
  DType type_;
  int64_t n_embd_, n_vocab_;
  Matrix head_;
  std::vector<float> norm_, x_;
};

// The low-rank terms of adapted matmuls over a batch: segments of tokens with
// their own factors (ranks differ), rows in no segment left as they are; with
// keep_u one segment covers every row and u = A x is kept (the backward's);
// with many, a segment of 3 rows every 4 (past what a launch carries inline).
class LoraCase final : public OpCase {
 public:
  LoraCase(int64_t n_in, int64_t n_out, int64_t n_tok, bool keep_u, bool many = false)
      : n_in_(n_in), n_out_(n_out), n_tok_(n_tok), keep_u_(keep_u),
        x_(random_floats(static_cast<size_t>(n_tok * n_in), 40)), y_(random_floats(static_cast<size_t>(n_tok * n_out), 41)) {
    // [tok0, n_tok, rank, scale]: tokens 0-2, none, 4 .. n_tok - 2, none.
    if (keep_u) segs_ = {{0, n_tok, 8, 0.5f}};
    else if (!many) segs_ = {{0, 3, 4, 2.0f}, {4, n_tok - 5, 16, 0.25f}};
    for (int64_t i = 0; many && 4 * i + 3 <= n_tok; ++i)
      segs_.push_back({4 * i, 3, 4 + 4 * (i % 4), 0.25f + 0.125f * static_cast<float>(i % 5)});
    for (size_t i = 0; i < segs_.size(); ++i) {
      a_.push_back(random_floats(static_cast<size_t>(segs_[i].rank * n_in), 42 + 2 * static_cast<uint32_t>(i), 0.1f));
      b_.push_back(random_floats(static_cast<size_t>(n_out * segs_[i].rank), 43 + 2 * static_cast<uint32_t>(i), 0.1f));
    }
  }

  static constexpr Op kOps[] = {Op::kLora};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    std::vector<LoraSegment> segs;  // the segments' parts in t0 .. t0 + n - 1, from row t0
    for (size_t i = 0; i < segs_.size(); ++i) {
      const Seg& s = segs_[i];
      const int64_t lo = std::max(s.tok0, t0), hi = std::min(s.tok0 + s.n_tok, t0 + n);
      if (lo < hi)
        segs.push_back({.tok0 = lo - t0, .n_tok = hi - lo, .a = r.in(a_[i]), .b = r.in(b_[i]), .rank = s.rank,
                        .scale = s.scale});
    }
    r.be().reserve({.n_tok = n_tok_, .lora_rank = 16});
    const double tol = matmul_tolerance(DType::kF32, ActRounding::kNone, 2);
    r.be().lora({.x = r.in(rows(x_, t0, n, n_in_)), .y = r.inout("y", rows(y_, t0, n, n_out_), n_out_, Tol::nmse(tol)),
                 .n_in = n_in_, .n_out = n_out_, .segs = segs,
                 .u = keep_u_ ? r.out("u", n, kRankU, Tol::nmse(tol)) : nullptr, .u_stride = keep_u_ ? kRankU : 0});
  }

 private:
  static constexpr int64_t kRankU = 8;
  struct Seg {
    int64_t tok0, n_tok, rank;
    float scale;
  };
  int64_t n_in_, n_out_, n_tok_;
  bool keep_u_;
  std::vector<Seg> segs_;
  std::vector<float> x_, y_;
  std::vector<std::vector<float>> a_, b_;
};

}  // namespace

void add_matmul_cases(OpCaseList& list) {
  for (DType t : kWeightTypes) {
    const std::string ty = dtype_name(t);
    add<NormGluCase>(list, "norm_glu_" + ty + "_256x512_t7", t, int64_t{256}, int64_t{512}, int64_t{7},
                     Activation::kSilu, int64_t{0});
    for (Activation act : {Activation::kSilu, Activation::kGelu})
      add<NormGluCase>(list, "norm_glu_" + ty + (act == Activation::kGelu ? "_geglu" : "_swiglu") + "_512x768_t11_part37",
                       t, int64_t{512}, int64_t{768}, int64_t{11}, act, int64_t{37});
    add<GluMatmulCase>(list, "geglu_" + ty + "_512x256_t6", t, int64_t{256}, int64_t{512}, int64_t{6}, Activation::kGelu);
    add<MatmulCase>(list, "matmul_" + ty + "_1024x300_t13", t, int64_t{1024}, int64_t{300}, int64_t{13});
    add<MatmulCase>(list, "matmul_" + ty + "_1024x300_prefill" + std::to_string(kPrefillTokens), t, int64_t{1024},
                    int64_t{300}, kPrefillTokens);
    if (dtype_traits(t).block_size <= 32)  // an odd number of 32-blocks, 37 rows
      add<MatmulCase>(list, "matmul_" + ty + "_96x37_t5", t, int64_t{96}, int64_t{37}, int64_t{5});
  }
  for (DType t : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K})
    add<NormGluCase>(list, "norm_glu_" + std::string(dtype_name(t)) + "_256x512_prefill" + std::to_string(kPrefillTokens),
                     t, int64_t{256}, int64_t{512}, kPrefillTokens, Activation::kSilu, int64_t{37});
  const std::vector<int32_t> tokens = {5, 95, 0, 5};
  add<EmbedCase>(list, "embed_q8_0_64x96", DType::kQ8_0, int64_t{64}, int64_t{96}, tokens);
  add<EmbedCase>(list, "embed_f16_64x96", DType::kF16, int64_t{64}, int64_t{96}, tokens);
  add<EmbedCase>(list, "embed_q4_K_256x96", DType::kQ4_K, int64_t{256}, int64_t{96}, tokens);
  add<LogitsCase>(list, "logits_q8_0_64x96", DType::kQ8_0, int64_t{64}, int64_t{96}, false);
  add<LogitsCase>(list, "logits_q8_0_64x96_residual", DType::kQ8_0, int64_t{64}, int64_t{96}, true);
  add<LogitsCase>(list, "logits_q6_K_256x96", DType::kQ6_K, int64_t{256}, int64_t{96}, true);
  add<LoraCase>(list, "lora_2_segments_288x200_t11", int64_t{288}, int64_t{200}, int64_t{11}, false);
  add<LoraCase>(list, "lora_keep_u_64x96_t5", int64_t{64}, int64_t{96}, int64_t{5}, true);
  add<LoraCase>(list, "lora_11_segments_96x80_t44", int64_t{96}, int64_t{80}, int64_t{44}, false, true);
  // Segments long enough for CUDA's GEMMs (135 and 130 tokens), beside a short one.
  add<LoraCase>(list, "lora_2_segments_256x192_t140", int64_t{256}, int64_t{192}, int64_t{140}, false);
  add<LoraCase>(list, "lora_keep_u_128x96_t130", int64_t{128}, int64_t{96}, int64_t{130}, true);
}

}  // namespace sluice::op_cases
