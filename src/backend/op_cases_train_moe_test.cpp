// Op cases of the routed FFN's training operators (TrainOps, backend/train_ops.h):
// gather_rows, slot_sum and its backward (weighted and not), gated_add and its
// backward (with a sigmoid gate and without). Rows are grouped by a fixed
// shuffle of the (token, slot) pairs, as the host groups them by expert; one
// token and k = 1, odd widths, and a prefill-size case past the token tiles.
//
// Tolerances: gather and the dy rows are copies and single products (bits);
// slot_sum is k float products summed in order (a device may differ only in
// contraction, ~1e-15); the gate's dot is a float sum in another order
// (~n 2^-24 before the sigmoid damps it), the dw and gate-gradient dots are
// doubles.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

size_t usize(int64_t n) { return static_cast<size_t>(n); }

TrainOps& routed_ops(OpRun& r) { return *r.be().train_ops(); }

// A fixed permutation of 0 .. n - 1 (the grouped row of each (token, slot)).
std::vector<int32_t> shuffled(int64_t n, uint32_t seed) {
  std::vector<int32_t> p(usize(n));
  std::iota(p.begin(), p.end(), 0);
  uint32_t s = seed;
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates on a fixed LCG
    s = s * 1664525u + 1013904223u;
    std::swap(p[usize(i)], p[usize(static_cast<int64_t>(s >> 8) % (i + 1))]);
  }
  return p;
}

class GatherRowsCase final : public OpCase {
 public:
  GatherRowsCase(int64_t n_src, int64_t n_rows, int64_t n)
      : n_src_(n_src), n_rows_(n_rows), n_(n), src_(random_floats(usize(n_src * n), 1)) {
    for (int64_t r = 0; r < n_rows; ++r) idx_.push_back(static_cast<int32_t>((r * 7 + 3) % n_src));  // repeats
  }
  static constexpr Op kOps[] = {Op::kGatherRows};
  std::span<const Op> ops() const override { return kOps; }
  void run(OpRun& r, int64_t, int64_t) override {
    routed_ops(r).gather_rows({.src = r.in(src_), .idx = idx_.data(), .dst = r.out("dst", n_rows_, n_, Tol::bits()),
                          .n_rows = n_rows_, .n = n_});
  }

 private:
  int64_t n_src_, n_rows_, n_;
  std::vector<float> src_;
  std::vector<int32_t> idx_;
};

// slot_sum (weighted or not) on rows grouped by a shuffle.
class SlotSumCase final : public OpCase {
 public:
  SlotSumCase(int64_t n_tok, int64_t k, int64_t n, bool weighted)
      : n_tok_(n_tok), k_(k), n_(n), weighted_(weighted), y_(random_floats(usize(n_tok * k * n), 2)),
        w_(random_floats(usize(n_tok * k), 3)), row_(shuffled(n_tok * k, 4)) {}
  static constexpr Op kOps[] = {Op::kSlotSum};
  std::span<const Op> ops() const override { return kOps; }
  void run(OpRun& r, int64_t, int64_t) override {
    routed_ops(r).slot_sum({.y = r.in(y_), .row = row_.data(), .w = weighted_ ? w_.data() : nullptr,
                       .out = r.out("out", n_tok_, n_, Tol::nmse(1e-13)), .n_tok = n_tok_, .k = k_, .n = n_});
  }

 private:
  int64_t n_tok_, k_, n_;
  bool weighted_;
  std::vector<float> y_, w_;
  std::vector<int32_t> row_;
};

class SlotSumBackwardCase final : public OpCase {
 public:
  SlotSumBackwardCase(int64_t n_tok, int64_t k, int64_t n)
      : n_tok_(n_tok), k_(k), n_(n), y_(random_floats(usize(n_tok * k * n), 5)), w_(random_floats(usize(n_tok * k), 6)),
        dout_(random_floats(usize(n_tok * n), 7)), row_(shuffled(n_tok * k, 8)) {}
  static constexpr Op kOps[] = {Op::kSlotSumBackward};
  std::span<const Op> ops() const override { return kOps; }
  void run(OpRun& r, int64_t, int64_t) override {
    routed_ops(r).slot_sum_backward({.fwd = {.y = r.in(y_), .row = row_.data(), .w = w_.data(), .n_tok = n_tok_, .k = k_,
                                        .n = n_},
                                .dout = r.in(dout_), .dy = r.out("dy", n_tok_ * k_, n_, Tol::bits()),
                                .dw = r.host_out("dw", n_tok_, k_, Tol::nmse(1e-13))});
  }

 private:
  int64_t n_tok_, k_, n_;
  std::vector<float> y_, w_, dout_;
  std::vector<int32_t> row_;
};

class GatedAddCase final : public OpCase {
 public:
  GatedAddCase(int64_t n_tok, int64_t n, bool gated)
      : n_tok_(n_tok), n_(n), gated_(gated), x_(random_floats(usize(n_tok * n), 9)),
        gate_(random_floats(usize(n), 10, 0.1f)), y_(random_floats(usize(n_tok * n), 11)),
        out_(random_floats(usize(n_tok * n), 12)) {}
  static constexpr Op kOps[] = {Op::kGatedAdd};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    routed_ops(r).gated_add({.x = r.in(rows(x_, t0, n, n_)), .gate = gated_ ? r.in(gate_) : nullptr,
                        .y = r.in(rows(y_, t0, n, n_)), .out = r.inout("out", rows(out_, t0, n, n_), n_, Tol::nmse(1e-11)),
                        .s = r.out("s", n, 1, Tol::nmse(1e-11)), .n_tok = n, .n = n_});
  }

 private:
  int64_t n_tok_, n_;
  bool gated_;
  std::vector<float> x_, gate_, y_, out_;
};

class GatedAddBackwardCase final : public OpCase {
 public:
  GatedAddBackwardCase(int64_t n_tok, int64_t n, bool gated)
      : n_tok_(n_tok), n_(n), gated_(gated), gate_(random_floats(usize(n), 13, 0.1f)),
        y_(random_floats(usize(n_tok * n), 14)), dout_(random_floats(usize(n_tok * n), 15)),
        dx_(random_floats(usize(n_tok * n), 16)) {
    for (float v : random_floats(usize(n_tok), 17)) s_.push_back(0.5f + 0.4f * std::clamp(v, -1.0f, 1.0f));  // in (0, 1)
  }
  static constexpr Op kOps[] = {Op::kGatedAddBackward};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    routed_ops(r).gated_add_backward(
        {.fwd = {.gate = gated_ ? r.in(gate_) : nullptr, .y = r.in(rows(y_, t0, n, n_)), .s = r.in(rows(s_, t0, n)),
                 .n_tok = n, .n = n_},
         .dout = r.in(rows(dout_, t0, n, n_)), .dy = r.out("dy", n, n_, Tol::bits()),
         .dx = r.inout("dx", rows(dx_, t0, n, n_), n_, Tol::nmse(1e-12))});
  }

 private:
  int64_t n_tok_, n_;
  bool gated_;
  std::vector<float> gate_, y_, dout_, dx_, s_;
};

}  // namespace

void add_train_moe_cases(OpCaseList& list) {
  // [n_src, n_rows, n]
  add<GatherRowsCase>(list, "gather_rows_1", int64_t{1}, int64_t{1}, int64_t{1});
  add<GatherRowsCase>(list, "gather_rows_repeats", int64_t{5}, int64_t{10}, int64_t{37});
  add<GatherRowsCase>(list, "gather_rows_prefill", kPrefillTokens, 8 * kPrefillTokens, int64_t{96});
  // [n_tok, k, n, weighted]
  for (bool weighted : {true, false}) {
    const std::string w = weighted ? "" : "_unweighted";
    add<SlotSumCase>(list, "slot_sum_1x1" + w, int64_t{1}, int64_t{1}, int64_t{1}, weighted);
    add<SlotSumCase>(list, "slot_sum_5x2x37" + w, int64_t{5}, int64_t{2}, int64_t{37}, weighted);
    add<SlotSumCase>(list, "slot_sum_prefill_k8" + w, kPrefillTokens + 2, int64_t{8}, int64_t{96}, weighted);
  }
  add<SlotSumBackwardCase>(list, "slot_sum_backward_1x1", int64_t{1}, int64_t{1}, int64_t{1});
  add<SlotSumBackwardCase>(list, "slot_sum_backward_5x2x37", int64_t{5}, int64_t{2}, int64_t{37});
  add<SlotSumBackwardCase>(list, "slot_sum_backward_prefill_k8", kPrefillTokens + 2, int64_t{8}, int64_t{96});
  add<SlotSumBackwardCase>(list, "slot_sum_backward_wide", int64_t{3}, int64_t{4}, int64_t{4099});
  // [n_tok, n, gated]
  for (bool gated : {true, false}) {
    const std::string g = gated ? "_gated" : "";
    add<GatedAddCase>(list, "gated_add_1x1" + g, int64_t{1}, int64_t{1}, gated);
    add<GatedAddCase>(list, "gated_add_7x300" + g, int64_t{7}, int64_t{300}, gated);
    add<GatedAddCase>(list, "gated_add_3x4099" + g, int64_t{3}, int64_t{4099}, gated);
    add<GatedAddBackwardCase>(list, "gated_add_backward_1x1" + g, int64_t{1}, int64_t{1}, gated);
    add<GatedAddBackwardCase>(list, "gated_add_backward_7x300" + g, int64_t{7}, int64_t{300}, gated);
    add<GatedAddBackwardCase>(list, "gated_add_backward_3x4099" + g, int64_t{3}, int64_t{4099}, gated);
  }
}

}  // namespace sluice::op_cases
