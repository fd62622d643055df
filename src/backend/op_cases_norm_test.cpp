// Op cases of the elementwise operators: add (the residual), rmsnorm (out of
// place and in place), and add followed by rmsnorm over the same rows (which a
// backend may fuse).
#include <cstring>
#include <string>
#include <vector>

#include "backend/op_cases.h"

namespace sluice::op_cases {
namespace {

// x += y over n_tok rows of n.
class AddCase final : public OpCase {
 public:
  AddCase(int64_t n_tok, int64_t n)
      : n_tok_(n_tok), n_(n), x_(random_floats(static_cast<size_t>(n_tok * n), 30, 2.0f)),
        y_(random_floats(static_cast<size_t>(n_tok * n), 31)) {}
  static constexpr Op kOps[] = {Op::kAdd};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    r.be().add(r.inout("x", rows(x_, t0, n, n_), n_, Tol::bits()), r.in(rows(y_, t0, n, n_)), n * n_);
  }

 private:
  int64_t n_tok_, n_;
  std::vector<float> x_, y_;
};

// out = rmsnorm(x) * w, out of place and in place (the same bits).
class RmsnormCase final : public OpCase {
 public:
  RmsnormCase(int64_t n_tok, int64_t n, float eps, double tol)
      : n_tok_(n_tok), n_(n), eps_(eps), tol_(tol), x_(random_floats(static_cast<size_t>(n_tok * n), 14, 5.0f)),
        w_(random_floats(static_cast<size_t>(n), 15)) {}
  static constexpr Op kOps[] = {Op::kRmsnorm};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    const auto x = rows(x_, t0, n, n_);
    r.be().rmsnorm(r.in(x), w_.data(), eps_, r.out("out", n, n_, Tol::nmse(tol_)), n, n_);
    float* inplace = r.inout("inplace", x, n_, Tol::nmse(tol_));
    r.be().rmsnorm(inplace, w_.data(), eps_, inplace, n, n_);
  }
  void check(const OpOutputs& outs) const override {
    const OpOutput* a = find_output(outs, "out");
    const OpOutput* b = find_output(outs, "inplace");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(0, std::memcmp(a->values.data(), b->values.data(), a->values.size() * sizeof(float)))
        << "in place differs from out of place";
  }

 private:
  int64_t n_tok_, n_;
  float eps_;
  double tol_;
  std::vector<float> x_, w_;
};

// x += y, then out = rmsnorm(x) * w: the residual add before a layer's norm.
class AddRmsnormCase final : public OpCase {
 public:
  AddRmsnormCase(int64_t n_tok, int64_t n)
      : n_tok_(n_tok), n_(n), x_(random_floats(static_cast<size_t>(n_tok * n), 32, 2.0f)),
        y_(random_floats(static_cast<size_t>(n_tok * n), 82)), w_(random_floats(static_cast<size_t>(n), 81)) {}
  static constexpr Op kOps[] = {Op::kAdd, Op::kRmsnorm};
  std::span<const Op> ops() const override { return kOps; }
  int64_t n_tok() const override { return n_tok_; }
  void run(OpRun& r, int64_t t0, int64_t n) override {
    float* x = r.inout("x", rows(x_, t0, n, n_), n_, Tol::bits());
    r.be().add(x, r.in(rows(y_, t0, n, n_)), n * n_);
    r.be().rmsnorm(x, w_.data(), 1e-5f, r.out("out", n, n_, Tol::nmse(1e-11)), n, n_);
  }

 private:
  int64_t n_tok_, n_;
  std::vector<float> x_, y_, w_;
};

}  // namespace

void add_norm_cases(OpCaseList& list) {
  add<AddCase>(list, "add_5x300", int64_t{5}, int64_t{300});
  add<RmsnormCase>(list, "rmsnorm_9x320", int64_t{9}, int64_t{320}, 1e-6f, 1e-12);
  add<RmsnormCase>(list, "rmsnorm_3x4097", int64_t{3}, int64_t{4097}, 1e-5f, 1e-12);
  add<AddRmsnormCase>(list, "add_rmsnorm_4x64", int64_t{4}, int64_t{64});
}

}  // namespace sluice::op_cases
