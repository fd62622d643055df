// Op cases of training attention (TrainOps::attention and its backward):
// one token, sequences shorter and longer than the CPU's tile (48 queries, 64
// keys), several sequences in one call, GQA ratios 1, 2 and 4, windows,
// soft-capping, head sizes that are not a multiple of a register tile; rows
// before the first sequence (in no call) are left as they were.
//
// Tolerances: f32 sums of at most a few hundred terms and a vector e^x of
// ~2 ulp give normalized squared errors of ~1e-13 forward and ~1e-12 back
// against the reference's double sums over whole softmax rows; 1e-9 and 1e-8
// leave room.
#include <cmath>
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

// The forward (out, lse) over sequences of one call, and with kBackward its
// dq, dk, dv from a random dout.
template <bool kBackward>
class TrainAttentionCase final : public OpCase {
 public:
  TrainAttentionCase(std::vector<TrainSeq> seqs, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t window,
                     float softcap)
      : seqs_(std::move(seqs)), n_head_(n_head), n_head_kv_(n_head_kv), head_dim_(head_dim), window_(window),
        softcap_(softcap) {
    for (const TrainSeq& s : seqs_) {
      n_tok_ = std::max(n_tok_, s.tok0 + s.n_tok);
      n_ctx_ = std::max(n_ctx_, s.n_tok);
    }
    const auto nq = static_cast<size_t>(n_tok_ * n_head * head_dim), nkv = static_cast<size_t>(n_tok_ * n_head_kv * head_dim);
    q_ = random_floats(nq, 1);
    k_ = random_floats(nkv, 2);
    v_ = random_floats(nkv, 3);
    dout_ = random_floats(nq, 4);
  }
  static constexpr Op kForward[] = {Op::kTrainAttention};
  static constexpr Op kBoth[] = {Op::kTrainAttention, Op::kTrainAttentionBackward};
  static constexpr std::span<const Op> kOps = kBackward ? std::span<const Op>(kBoth) : std::span<const Op>(kForward);
  std::span<const Op> ops() const override { return kOps; }

  void run(OpRun& r, int64_t, int64_t) override {
    TrainOps& ops = *r.be().train_ops();
    const int64_t nq = n_head_ * head_dim_, nkv = n_head_kv_ * head_dim_;
    ops.reserve({.n_tok = n_tok_, .n_ctx = n_ctx_, .n_head = n_head_, .head_dim = head_dim_, .n_in_max = nq});
    const Tol fwd = Tol::nmse_where_written(1e-9), bwd = Tol::nmse_where_written(1e-8);
    const TrainAttentionArgs a{.q = r.in(q_), .k = r.in(k_), .v = r.in(v_), .out = r.out("out", n_tok_, nq, fwd),
                               .lse = r.out("lse", n_tok_, n_head_, fwd), .seqs = seqs_, .n_head = n_head_,
                               .n_head_kv = n_head_kv_, .head_dim = head_dim_,
                               .scale = 1.0f / std::sqrt(static_cast<float>(head_dim_)), .window = window_,
                               .softcap = softcap_};
    ops.attention(a);
    if (!kBackward) return;
    ops.attention_backward({.fwd = a, .dout = r.in(dout_), .dq = r.out("dq", n_tok_, nq, bwd),
                            .dk = r.out("dk", n_tok_, nkv, bwd), .dv = r.out("dv", n_tok_, nkv, bwd)});
  }

 private:
  std::vector<TrainSeq> seqs_;
  int64_t n_head_, n_head_kv_, head_dim_, window_;
  float softcap_;
  int64_t n_tok_ = 0, n_ctx_ = 0;
  std::vector<float> q_, k_, v_, dout_;
};

}  // namespace

void add_train_attention_cases(OpCaseList& list) {
  struct Row {
    const char* name;
    std::vector<TrainSeq> seqs;
    int64_t n_head, n_head_kv, head_dim;
    int64_t window = 0;
    float softcap = 0.0f;
  };
  const Row rows[] = {
      {"one_token", {{0, 1}}, 2, 1, 8},
      {"two_short_seqs", {{0, 5}, {5, 3}}, 4, 2, 4},
      {"past_a_tile", {{0, 150}}, 2, 2, 64},
      {"past_a_tile_gqa2", {{0, 150}}, 4, 2, 40},
      {"past_a_tile_gqa4", {{0, 130}}, 4, 1, 72},
      {"several_seqs", {{0, 70}, {70, 131}, {201, 1}}, 4, 2, 16},
      {"window", {{0, 150}}, 2, 1, 32, 20},
      {"window_of_one", {{0, 70}}, 2, 2, 8, 1},
      {"window_past_a_tile", {{0, 200}}, 2, 1, 16, 100},
      {"softcap", {{0, 110}}, 4, 2, 24, 0, 5.0f},
      {"window_softcap_from_row3", {{3, 97}}, 2, 1, 128, 33, 2.0f},
  };
  // Every backward case checks its forward's out and lse too; the forward
  // alone has cases of its own on three rows.
  for (const Row& c : rows) {
    const std::string name = c.name;
    if (name == "one_token" || name == "several_seqs" || name == "window_softcap_from_row3")
      add<TrainAttentionCase<false>>(list, "train_attention_" + name, c.seqs, c.n_head, c.n_head_kv, c.head_dim,
                                     c.window, c.softcap);
    add<TrainAttentionCase<true>>(list, "train_attention_backward_" + name, c.seqs, c.n_head, c.n_head_kv,
                                  c.head_dim, c.window, c.softcap);
  }
}

}  // namespace sluice::op_cases
