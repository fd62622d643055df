// Op cases of mixture-of-experts layers: route (the top-k rule on the
// router's outputs) and expert_ffn (routed experts, with and without a gated
// shared expert).
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

class RouteCase final : public OpCase {
 public:
  RouteCase(int64_t n_tok, int64_t n_expert, int64_t n_used, bool renormalize)
      : n_expert_(n_expert), n_used_(n_used), n_tok_(n_tok), renormalize_(renormalize),
        logits_(random_floats(static_cast<size_t>(n_tok * n_expert), 83)) {}
  static constexpr Op kOps[] = {Op::kRoute};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    // The router's outputs are in the backend's memory; ids and weights go to the host.
    r.be().route({.logits = r.in(rows(logits_, t0, n, n_expert_)),
                  .n_tok = n, .n_expert = n_expert_, .n_used = n_used_, .renormalize = renormalize_,
                  .ids = r.host_ints("ids", n, n_used_), .weights = r.host_out("weights", n, n_used_, Tol::bits())});
  }

 private:
  int64_t n_expert_, n_used_, n_tok_;
  bool renormalize_;
  std::vector<float> logits_;
};

// n_expert experts of one type (gate, up: [n_ff, n_embd]; down: [n_embd, n_ff]),
// each token routed to n_used of them; optionally a shared expert of width
// n_ff_shared (gate and up of shared_type, down Q8_0) scaled by a sigmoid gate.
struct MoeShape {
  DType type;
  int64_t n_expert, n_used, n_embd, n_ff, n_tok;
  DType shared_type;
  int64_t n_ff_shared;  // 0: no shared expert
  double rounded_nmse;  // the tolerance where activations are rounded (a weighted
                        // sum of experts averages their errors: below one FFN's)
  // Routed by the backend (routed_ffn: top-k of random router outputs, then
  // the FFN) instead of expert_ffn over fixed ids.
  bool routed = false;
};

class ExpertFfnCase final : public OpCase {
 public:
  explicit ExpertFfnCase(const MoeShape& s)
      : s_(s), x_(random_floats(static_cast<size_t>(s.n_tok * s.n_embd), 70)),
        shared_gate_(random_floats(static_cast<size_t>(s.n_embd), 71, 0.1f)),
        logits_(random_floats(static_cast<size_t>(s.n_tok * s.n_expert), 72)) {
    for (int64_t e = 0; e < s.n_expert; ++e) {
      mats_.emplace_back(s.type, s.n_embd, s.n_ff, 20 + static_cast<uint32_t>(e));
      mats_.emplace_back(s.type, s.n_embd, s.n_ff, 40 + static_cast<uint32_t>(e));
      mats_.emplace_back(s.type, s.n_ff, s.n_embd, 60 + static_cast<uint32_t>(e));
    }
    if (s.n_ff_shared > 0) {
      mats_.emplace_back(s.shared_type, s.n_embd, s.n_ff_shared, 90);
      mats_.emplace_back(s.shared_type, s.n_embd, s.n_ff_shared, 91);
      mats_.emplace_back(DType::kQ8_0, s.n_ff_shared, s.n_embd, 92);
    }
    ids_.resize(static_cast<size_t>(s.n_tok * s.n_used));
    weights_.resize(ids_.size());
    for (size_t i = 0; i < ids_.size(); ++i) {
      ids_[i] = static_cast<int32_t>((i * 5 + i / 2) % static_cast<size_t>(s.n_expert));
      weights_[i] = 0.25f + 0.5f * static_cast<float>(i % 2);
    }
  }

  static constexpr Op kOps[] = {Op::kExpertFfn};
  static constexpr Op kRoutedOps[] = {Op::kRoute, Op::kExpertFfn};
  std::span<const Op> ops() const override { return s_.routed ? std::span<const Op>(kRoutedOps) : kOps; }
  OpTypes types() const override { return {.weight = s_.type, .act = Activation::kSilu}; }
  bool supported_by(const Backend& be) const override {
    return be.supports(Op::kExpertFfn, types()) &&
           (s_.n_ff_shared == 0 || be.supports(Op::kExpertFfn, {.weight = s_.shared_type}));
  }
  int64_t n_tok() const override { return s_.n_tok; }

  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().reserve({.n_tok = s_.n_tok, .n_in_max = std::max(s_.n_ff, s_.n_ff_shared), .n_expert = s_.n_expert,
                    .n_used = s_.n_used, .n_ff_expert = s_.n_ff, .n_ff_shared = s_.n_ff_shared, .n_embd = s_.n_embd});
    std::vector<ExpertWeights> experts;
    for (size_t i = 0; i + 2 < mats_.size(); i += 3) {
      const auto v = r.weights({mats_[i].view, mats_[i + 1].view, mats_[i + 2].view});
      experts.push_back({v[0], v[1], v[2]});
    }
    ExpertWeights shared;
    if (s_.n_ff_shared > 0) shared = experts.back(), experts.pop_back();
    const auto tok = static_cast<size_t>(t0 * s_.n_used);
    const ExpertFfnArgs ffn{.x = r.in(rows(x_, t0, n, s_.n_embd)),
                            .out = r.out("out", n, s_.n_embd, Tol::nmse(tolerance(r, n))), .ids = ids_.data() + tok,
                            .weights = weights_.data() + tok, .n_tok = n, .n_used = s_.n_used, .n_embd = s_.n_embd,
                            .n_ff = s_.n_ff, .experts = experts, .shared = s_.n_ff_shared > 0 ? &shared : nullptr,
                            .n_ff_shared = s_.n_ff_shared,
                            .shared_gate = s_.n_ff_shared > 0 ? shared_gate_.data() : nullptr};
    if (!s_.routed) {
      r.be().expert_ffn(ffn);
      return;
    }
    // The ids must be route_topk's; the weights may differ in the last bits
    // (a device's expf and sum order). They are the host's after wait_idle().
    r.be().routed_ffn({.logits = r.in(rows(logits_, t0, n, s_.n_expert)), .n_tok = n, .n_expert = s_.n_expert,
                       .n_used = s_.n_used, .renormalize = true, .ids = r.host_ints("ids", n, s_.n_used),
                       .weights = r.host_out("weights", n, s_.n_used, Tol::nmse(1e-12))},
                      ffn);
    r.be().wait_idle();
  }

 private:
  // n: the call's tokens (each expert's matmuls see at most that many).
  double tolerance(const OpRun& r, int64_t n) const {
    const bool rounded = r.rounding(s_.type, n) != ActRounding::kNone ||
                         (s_.n_ff_shared > 0 && r.rounding(s_.shared_type, n) != ActRounding::kNone);
    return rounded ? s_.rounded_nmse : matmul_tolerance(s_.type, ActRounding::kNone, 2);
  }

  MoeShape s_;
  std::vector<Matrix> mats_;
  std::vector<float> x_, shared_gate_, weights_, logits_;
  std::vector<int32_t> ids_;
};

}  // namespace

void add_moe_cases(OpCaseList& list) {
  add<RouteCase>(list, "route_8_experts_top2", int64_t{3}, int64_t{8}, int64_t{2}, true);
  add<RouteCase>(list, "route_60_experts_top4_not_renormalized", int64_t{5}, int64_t{60}, int64_t{4}, false);
  add<ExpertFfnCase>(list, "expert_ffn_q8_0_6x128x96_top2",
                     MoeShape{DType::kQ8_0, 6, 2, 128, 96, 9, DType::kF32, 0, 4e-4});
  add<ExpertFfnCase>(list, "expert_ffn_q8_0_6x256x96_top2_shared_q4_K_160",
                     MoeShape{DType::kQ8_0, 6, 2, 256, 96, 9, DType::kQ4_K, 160, 2e-4});
  add<ExpertFfnCase>(list, "expert_ffn_q4_K_4x256x256_top2", MoeShape{DType::kQ4_K, 4, 2, 256, 256, 5, DType::kF32, 0, 8e-4});
  // More rows per expert than a pass of 8 tokens (17 tokens, 8 of 16 experts);
  // a type with 8-bit activations and one decoded to float.
  add<ExpertFfnCase>(list, "expert_ffn_q8_0_16x128x96_top8_t17",
                     MoeShape{DType::kQ8_0, 16, 8, 128, 96, 17, DType::kF32, 0, 4e-4});
  add<ExpertFfnCase>(list, "expert_ffn_q4_1_16x128x96_top8_t17",
                     MoeShape{DType::kQ4_1, 16, 8, 128, 96, 17, DType::kF32, 0, 4e-4});
  // Decode shapes: one token and a few, k of many experts (a GPU backend
  // takes every chosen expert in one launch per matrix); 8-bit activations,
  // a 16-bit type and a K-quant.
  add<ExpertFfnCase>(list, "expert_ffn_q4_0_32x256x128_top8_t1",
                     MoeShape{DType::kQ4_0, 32, 8, 256, 128, 1, DType::kF32, 0, 4e-4});
  add<ExpertFfnCase>(list, "expert_ffn_q4_0_32x256x128_top8_t6_shared_q4_0_64",
                     MoeShape{DType::kQ4_0, 32, 8, 256, 128, 6, DType::kQ4_0, 64, 4e-4});
  add<ExpertFfnCase>(list, "expert_ffn_f16_16x128x64_top4_t5", MoeShape{DType::kF16, 16, 4, 128, 64, 5, DType::kF32, 0, 4e-4});
  add<ExpertFfnCase>(list, "expert_ffn_q6_K_8x256x256_top2_t3", MoeShape{DType::kQ6_K, 8, 2, 256, 256, 3, DType::kF32, 0, 8e-4});
  // routed_ffn: the router's top-k and the experts in one call (a GPU backend
  // routes on the device for decode-sized calls; the last one is past that).
  add<ExpertFfnCase>(list, "routed_ffn_q4_0_32x256x128_top8_t1",
                     MoeShape{DType::kQ4_0, 32, 8, 256, 128, 1, DType::kF32, 0, 4e-4, true});
  add<ExpertFfnCase>(list, "routed_ffn_q8_0_16x128x96_top8_t17",
                     MoeShape{DType::kQ8_0, 16, 8, 128, 96, 17, DType::kF32, 0, 4e-4, true});
  add<ExpertFfnCase>(list, "routed_ffn_q4_0_32x256x128_top8_t6_shared_q4_0_64",
                     MoeShape{DType::kQ4_0, 32, 8, 256, 128, 6, DType::kQ4_0, 64, 4e-4, true});
  add<ExpertFfnCase>(list, "routed_ffn_q4_K_8x256x256_top2_t5", MoeShape{DType::kQ4_K, 8, 2, 256, 256, 5, DType::kF32, 0, 8e-4, true});
  add<ExpertFfnCase>(list, "routed_ffn_f16_16x128x64_top8_t40", MoeShape{DType::kF16, 16, 8, 128, 64, 40, DType::kF32, 0, 4e-4, true});
}

}  // namespace sluice::op_cases
