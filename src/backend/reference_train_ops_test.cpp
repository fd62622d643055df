// The training operators' reference against central finite differences of
// their forward definitions: each backward is the gradient of a random linear
// functional of the forward's output. This checks the math of the yardstick
// that faster implementations are then compared with.
#include "backend/reference_train_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "backend/cpu/op_test_util.h"
#include "backend/reference_backend.h"
#include "quant/quant.h"

namespace sluice {
namespace {

using cpu::testing::random_floats;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks analytic[i] against d f / d x[i] by central differences, for every i
// (f: the functional of x). Tolerance relative to the largest gradient.
void expect_gradient(std::vector<float>& x, const std::vector<float>& analytic,
                     const std::function<double()>& f, double h = 1e-2, double tol = 2e-3) {
  ASSERT_EQ(x.size(), analytic.size());
  double amax = 1e-12;
  for (float g : analytic) amax = std::max(amax, static_cast<double>(std::fabs(g)));
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = static_cast<float>(x0 + h);
    const double fp = f();
    x[i] = static_cast<float>(x0 - h);
    const double fm = f();
    x[i] = x0;
    const double numeric = (fp - fm) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, tol * amax) << "element " << i;
  }
}

TEST(ReferenceTrainOps, MatmulTIsTheTransposeOfMatmul) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_in = 64, n_out = 48, n_tok = 3;
  for (DType type : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    if (type == DType::kQ4_K && n_in % 256 != 0) continue;
    std::vector<float> wf = random_floats(static_cast<size_t>(n_in * n_out), 1);
    std::vector<uint8_t> wq(row_bytes(type, n_in) * n_out);
    for (int64_t r = 0; r < n_out; ++r) quantize_row(type, wf.data() + r * n_in, wq.data() + r * row_bytes(type, n_in), n_in);
    const WeightView w{.type = type, .data = wq.data(), .n_in = n_in, .n_out = n_out};
    ops.reserve({.n_tok = n_tok, .n_ctx = 1, .n_head = 1, .head_dim = 1, .n_in_max = n_in});
    std::vector<float> x = random_floats(static_cast<size_t>(n_tok * n_in), 2);
    std::vector<float> dy = random_floats(static_cast<size_t>(n_tok * n_out), 3);
    std::vector<float> y(static_cast<size_t>(n_tok * n_out));
    std::vector<float> dx(static_cast<size_t>(n_tok * n_in), 7.0f);
    MatmulOut mo{.w = w, .y = y.data()};
    be.matmul({&mo, 1}, x.data(), n_in, n_tok);
    ops.matmul_t({.w = w, .dy = dy.data(), .dx = dx.data(), .n_tok = n_tok, .accumulate = false});
    // <W x, dy> == <x, W^T dy> token by token.
    for (int64_t t = 0; t < n_tok; ++t) {
      double a = 0, b = 0;
      for (int64_t r = 0; r < n_out; ++r) a += static_cast<double>(y[t * n_out + r]) * dy[t * n_out + r];
      for (int64_t i = 0; i < n_in; ++i) b += static_cast<double>(x[t * n_in + i]) * dx[t * n_in + i];
      EXPECT_NEAR(a, b, 1e-4 * std::fabs(a) + 1e-4) << dtype_name(type);
    }
    std::vector<float> dx2 = dx;
    ops.matmul_t({.w = w, .dy = dy.data(), .dx = dx2.data(), .n_tok = n_tok, .accumulate = true});
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx2[i], 2 * dx[i]);
  }
}

TEST(ReferenceTrainOps, RmsNormBackwardIsTheGradient) {
  ReferenceBackend be;
  const int64_t n = 16, n_tok = 2;
  std::vector<float> x = random_floats(static_cast<size_t>(n * n_tok), 4);
  std::vector<float> w = random_floats(static_cast<size_t>(n), 5);
  std::vector<float> c = random_floats(static_cast<size_t>(n * n_tok), 6);
  std::vector<float> y(x.size());
  auto f = [&] {
    be.rmsnorm(x.data(), w.data(), 1e-5f, y.data(), n_tok, n);
    return dot(y, c);
  };
  std::vector<float> dx(x.size(), 0.0f);
  be.train_ops()->rmsnorm_backward({.x = x.data(), .w = w.data(), .dy = c.data(), .dx = dx.data(), .n_tok = n_tok,
                                    .n = n, .eps = 1e-5f});
  expect_gradient(x, dx, f, 1e-3);
}

TEST(ReferenceTrainOps, RopeInverseIsTheTranspose) {
  ReferenceBackend be;
  const int64_t n_tok = 3, n_head = 2, head_dim = 8, n_rot = 8;
  for (RopeLayout layout : {RopeLayout::kAdjacent, RopeLayout::kNeox}) {
    std::vector<float> cs(static_cast<size_t>(n_tok * n_rot));
    std::vector<int64_t> pos = {0, 5, 17};
    std::vector<double> inv = {1.0, 0.3, 0.1, 0.01};
    be.rope_tables(pos, inv, 1.0, cs.data());
    std::vector<float> x = random_floats(static_cast<size_t>(n_tok * n_head * head_dim), 7);
    std::vector<float> y = random_floats(x.size(), 8);
    std::vector<float> rx = x, ry = y;
    RopeArgs a{.x = rx.data(), .cos_sin = cs.data(), .n_tok = n_tok, .n_head = n_head, .head_dim = head_dim,
               .n_rot = n_rot, .layout = layout};
    be.train_ops()->rope(a);
    a.x = ry.data();
    a.inverse = true;
    be.train_ops()->rope(a);
    EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-4);
    a.x = rx.data();
    be.train_ops()->rope(a);  // inverse of forward: back to x
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-5);
  }
}

TEST(ReferenceTrainOps, GluBackwardIsTheGradient) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_ff = 12, n_tok = 2;
  for (Activation act : {Activation::kSilu, Activation::kGelu}) {
    std::vector<float> g = random_floats(static_cast<size_t>(n_ff * n_tok), 9, 2.0f);
    std::vector<float> u = random_floats(g.size(), 10);
    std::vector<float> c = random_floats(g.size(), 11);
    std::vector<float> h(g.size());
    auto f = [&] {
      ops.glu({.g = g.data(), .u = u.data(), .h = h.data(), .n_tok = n_tok, .n_ff = n_ff, .act = act});
      return dot(h, c);
    };
    std::vector<float> dg(g.size()), du(g.size());
    ops.glu_backward({.g = g.data(), .u = u.data(), .dh = c.data(), .dg = dg.data(), .du = du.data(),
                      .n_tok = n_tok, .n_ff = n_ff, .act = act});
    expect_gradient(g, dg, f, 1e-3);
    expect_gradient(u, du, f, 1e-3);
  }
}

TEST(ReferenceTrainOps, AttentionBackwardIsTheGradient) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_head = 4, n_head_kv = 2, hd = 4;
  const std::vector<TrainSeq> seqs = {{0, 5}, {5, 3}};
  const int64_t n_tok = 8;
  ops.reserve({.n_tok = n_tok, .n_ctx = 8, .n_head = n_head, .head_dim = hd, .n_in_max = 16});
  struct Variant { int64_t window; float softcap; };
  for (Variant var : {Variant{0, 0.0f}, Variant{2, 0.0f}, Variant{0, 3.0f}}) {
    std::vector<float> q = random_floats(static_cast<size_t>(n_tok * n_head * hd), 12);
    std::vector<float> k = random_floats(static_cast<size_t>(n_tok * n_head_kv * hd), 13);
    std::vector<float> v = random_floats(k.size(), 14);
    std::vector<float> c = random_floats(q.size(), 15);
    std::vector<float> out(q.size()), lse(static_cast<size_t>(n_tok * n_head));
    TrainAttentionArgs a{.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data(), .lse = lse.data(),
                         .seqs = seqs, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = hd, .scale = 0.5f,
                         .window = var.window, .softcap = var.softcap};
    auto f = [&] {
      ops.attention(a);
      return dot(out, c);
    };
    f();
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    ops.attention_backward({.fwd = a, .dout = c.data(), .dq = dq.data(), .dk = dk.data(), .dv = dv.data()});
    expect_gradient(q, dq, f, 1e-3);
    expect_gradient(k, dk, f, 1e-3);
    expect_gradient(v, dv, f, 1e-3);
  }
}

TEST(ReferenceTrainOps, CrossEntropyIsTheGradientOfTheLoss) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_vocab = 10, n_tok = 3;
  std::vector<float> z = random_floats(static_cast<size_t>(n_vocab * n_tok), 16, 2.0f);
  const std::vector<int32_t> targets = {3, -1, 9};
  std::vector<double> loss(n_tok);
  auto f = [&] {
    std::vector<float> zz = z;
    ops.cross_entropy({.logits = zz.data(), .targets = targets.data(), .loss = loss.data(), .n_tok = n_tok,
                       .n_vocab = n_vocab, .grad_scale = 0.5f});
    return 0.5 * (loss[0] + loss[1] + loss[2]);
  };
  std::vector<float> grad = z;
  ops.cross_entropy({.logits = grad.data(), .targets = targets.data(), .loss = loss.data(), .n_tok = n_tok,
                     .n_vocab = n_vocab, .grad_scale = 0.5f});
  EXPECT_EQ(loss[1], 0.0);
  for (int64_t i = 0; i < n_vocab; ++i) EXPECT_EQ(grad[n_vocab + i], 0.0f);
  expect_gradient(z, grad, f, 1e-3);
}

TEST(ReferenceTrainOps, LoraBackwardIsTheGradient) {
  ReferenceBackend be;
  const int64_t n_in = 6, n_out = 5, rank = 3, n_tok = 4;
  std::vector<float> x = random_floats(static_cast<size_t>(n_tok * n_in), 17);
  std::vector<float> A = random_floats(static_cast<size_t>(rank * n_in), 18);
  std::vector<float> B = random_floats(static_cast<size_t>(n_out * rank), 19);
  std::vector<float> c = random_floats(static_cast<size_t>(n_tok * n_out), 20);
  std::vector<float> y(c.size()), u(static_cast<size_t>(n_tok * rank));
  const float scale = 1.5f;
  auto f = [&] {
    std::fill(y.begin(), y.end(), 0.0f);
    const LoraSegment sg{.tok0 = 0, .n_tok = n_tok, .a = A.data(), .b = B.data(), .rank = rank, .scale = scale};
    be.lora({.x = x.data(), .y = y.data(), .n_in = n_in, .n_out = n_out, .segs = {&sg, 1}, .u = u.data(),
             .u_stride = rank});
    return dot(y, c);
  };
  f();
  std::vector<float> da(A.size(), 0.0f), db(B.size(), 0.0f), dx(x.size(), 0.0f);
  be.train_ops()->lora_backward({.x = x.data(), .u = u.data(), .dy = c.data(), .a = A.data(), .b = B.data(),
                                 .da = da.data(), .db = db.data(), .dx = dx.data(), .n_tok = n_tok, .n_in = n_in,
                                 .n_out = n_out, .rank = rank, .scale = scale});
  expect_gradient(A, da, f, 1e-3);
  expect_gradient(B, db, f, 1e-3);
  expect_gradient(x, dx, f, 1e-3);
}

TEST(ReferenceTrainOps, LoraLeavesRowsOutsideSegmentsAlone) {
  ReferenceBackend be;
  const int64_t n_in = 4, n_out = 3, rank = 2;
  std::vector<float> x = random_floats(static_cast<size_t>(3 * n_in), 21);
  std::vector<float> A = random_floats(static_cast<size_t>(rank * n_in), 22);
  std::vector<float> B = random_floats(static_cast<size_t>(n_out * rank), 23);
  std::vector<float> y(static_cast<size_t>(3 * n_out), 1.0f);
  const LoraSegment sg{.tok0 = 1, .n_tok = 1, .a = A.data(), .b = B.data(), .rank = rank, .scale = 2.0f};
  be.lora({.x = x.data(), .y = y.data(), .n_in = n_in, .n_out = n_out, .segs = {&sg, 1}});
  for (int64_t o = 0; o < n_out; ++o) {
    EXPECT_EQ(y[o], 1.0f);
    EXPECT_EQ(y[2 * n_out + o], 1.0f);
    double s = 0;
    for (int64_t r = 0; r < rank; ++r) {
      double ax = 0;
      for (int64_t i = 0; i < n_in; ++i) ax += A[r * n_in + i] * x[n_in + i];
      s += B[o * rank + r] * ax;
    }
    EXPECT_NEAR(y[n_out + o], 1.0 + 2.0 * s, 1e-5);
  }
}

TEST(ReferenceTrainOps, AdamWFollowsTorch) {
  ReferenceBackend be;
  // One parameter, two steps, worked by hand: lr 0.1, b1 0.9, b2 0.999, eps 1e-8, wd 0.01.
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g1 = 0.5f, g2 = -0.25f;
  AdamWArgs a{.p = &p, .g = &g1, .m = &m, .v = &v, .n = 1, .step = 1, .lr = 0.1f, .weight_decay = 0.01f};
  be.train_ops()->adamw(a);
  double pe = 1.0 - 0.1 * 0.01 * 1.0;
  double me = 0.1 * 0.5, ve = 0.001 * 0.25;
  pe -= 0.1 * (me / 0.1) / (std::sqrt(ve / 0.001) + 1e-8);
  EXPECT_NEAR(p, pe, 1e-6);
  a.g = &g2;
  a.step = 2;
  be.train_ops()->adamw(a);
  pe -= 0.1 * 0.01 * pe;
  me = 0.9 * me + 0.1 * -0.25;
  ve = 0.999 * ve + 0.001 * 0.0625;
  pe -= 0.1 * (me / (1 - 0.81)) / (std::sqrt(ve / (1 - 0.999 * 0.999)) + 1e-8);
  EXPECT_NEAR(p, pe, 1e-6);
}

// slot_sum's backward: dw and the grouped rows' dy are the gradient of
// c . slot_sum(y, w) in w and y; the unweighted sum moves rows unchanged.
TEST(ReferenceTrainOps, SlotSumBackwardIsTheGradient) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_tok = 3, k = 2, n = 5;
  std::vector<float> y = random_floats(static_cast<size_t>(n_tok * k * n), 30);
  std::vector<float> w = random_floats(static_cast<size_t>(n_tok * k), 31);
  const std::vector<float> c = random_floats(static_cast<size_t>(n_tok * n), 32);
  const std::vector<int32_t> row = {4, 1, 0, 5, 3, 2};
  std::vector<float> out(c.size());
  auto f = [&] {
    ops.slot_sum({.y = y.data(), .row = row.data(), .w = w.data(), .out = out.data(), .n_tok = n_tok, .k = k, .n = n});
    return dot(out, c);
  };
  std::vector<float> dy(y.size()), dw(w.size());
  ops.slot_sum_backward({.fwd = {.y = y.data(), .row = row.data(), .w = w.data(), .n_tok = n_tok, .k = k, .n = n},
                         .dout = c.data(), .dy = dy.data(), .dw = dw.data()});
  expect_gradient(y, dy, f, 1e-2, 1e-5);
  expect_gradient(w, dw, f, 1e-2, 1e-5);
  // Unweighted: out[t] = sum of its slots' rows.
  ops.slot_sum({.y = y.data(), .row = row.data(), .out = out.data(), .n_tok = n_tok, .k = k, .n = n});
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(out[t * n + i], 0.0f + y[row[t * k] * n + i] + y[row[t * k + 1] * n + i]);
}

// gated_add's backward: dy and dx are the gradient of c . out in y and x
// (s = sigmoid(gate . x)); without a gate, dy = dout.
TEST(ReferenceTrainOps, GatedAddBackwardIsTheGradient) {
  ReferenceBackend be;
  TrainOps& ops = *be.train_ops();
  const int64_t n_tok = 2, n = 6;
  for (bool gated : {true, false}) {
    std::vector<float> x = random_floats(static_cast<size_t>(n_tok * n), 33);
    std::vector<float> y = random_floats(x.size(), 34);
    const std::vector<float> gate = random_floats(static_cast<size_t>(n), 35);
    const std::vector<float> c = random_floats(x.size(), 36);
    std::vector<float> out(x.size()), s(static_cast<size_t>(n_tok));
    const float* g = gated ? gate.data() : nullptr;
    auto f = [&] {
      std::fill(out.begin(), out.end(), 0.0f);
      ops.gated_add({.x = x.data(), .gate = g, .y = y.data(), .out = out.data(), .s = s.data(), .n_tok = n_tok, .n = n});
      return dot(out, c);
    };
    f();
    std::vector<float> dy(y.size()), dx(x.size(), 0.0f);
    ops.gated_add_backward({.fwd = {.gate = g, .y = y.data(), .s = s.data(), .n_tok = n_tok, .n = n},
                            .dout = c.data(), .dy = dy.data(), .dx = dx.data()});
    expect_gradient(y, dy, f, 1e-2, 1e-4);
    if (gated) {
      expect_gradient(x, dx, f, 1e-2, 1e-3);
    } else {
      EXPECT_EQ(dy, c);
    }
  }
}

}  // namespace
}  // namespace sluice
