// The CPU training operators other than matmul_t and attention against the
// reference's (backend/reference_train_ops.h), each as a table of cases and
// one run function for the shared checking loop (train_test_util.h): odd
// sizes (vector tails), one token and many, both activations and RoPE
// layouts, the inverse rotation, ignored cross-entropy targets, ranks 1 to 256.
//
// Error bounds (normalized squared error): elementwise f32 work with a vector
// e^x of ~2 ulp lands near 1e-14; f32 sums over a few hundred tokens or a
// rank near 1e-12; the bounds leave two orders of magnitude or more.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/train_test_util.h"
#include "backend/rope_tables.h"

namespace sluice::cpu {
namespace {

using testing::check_against_reference;
using testing::guarded_copy;
using testing::GuardedFloats;
using testing::Outputs;
using testing::random_floats;
using testing::take;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// ---- RMSNorm backward -------------------------------------------------------

struct RmsNormCase {
  const char* name;
  int64_t n_tok, n;
};

Outputs run_rmsnorm_backward(TrainOps& ops, const RmsNormCase& c) {
  const std::vector<float> x = random_floats(sz(c.n_tok * c.n), 1), w = random_floats(sz(c.n), 2);
  const std::vector<float> dy = random_floats(sz(c.n_tok * c.n), 3);
  GuardedFloats dx = guarded_copy(random_floats(sz(c.n_tok * c.n), 4));
  ops.rmsnorm_backward(
      {.x = x.data(), .w = w.data(), .dy = dy.data(), .dx = dx.data(), .n_tok = c.n_tok, .n = c.n, .eps = 1e-5f});
  return {take(dx, c.name)};
}

TEST(CpuTrainOps, RmsNormBackward) {
  const RmsNormCase cases[] = {{"one element", 1, 1}, {"odd width", 3, 37}, {"many tokens", 70, 288}};
  for (const RmsNormCase& c : cases) check_against_reference<RmsNormCase>(c, run_rmsnorm_backward, {1e-11});
}

// ---- RoPE on plain rows -----------------------------------------------------

struct RopeCase {
  const char* name;
  int64_t n_tok, n_head, head_dim, n_rot;
  RopeLayout layout;
  bool inverse;
};

Outputs run_rope(TrainOps& ops, const RopeCase& c) {
  std::vector<int64_t> pos(sz(c.n_tok));
  for (int64_t t = 0; t < c.n_tok; ++t) pos[sz(t)] = 3 * t + 1;
  std::vector<double> inv_freq(sz(c.n_rot / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0, -2.0 * i / c.n_rot);
  std::vector<float> cs(sz(c.n_tok * c.n_rot));
  rope_cos_sin(pos, inv_freq, 1.0, cs.data());
  GuardedFloats x = guarded_copy(random_floats(sz(c.n_tok * c.n_head * c.head_dim), 5));
  ops.rope({.x = x.data(), .cos_sin = cs.data(), .n_tok = c.n_tok, .n_head = c.n_head, .head_dim = c.head_dim,
            .n_rot = c.n_rot, .layout = c.layout, .inverse = c.inverse});
  return {take(x, c.name)};
}

TEST(CpuTrainOps, Rope) {
  const RopeCase cases[] = {
      {"adjacent", 5, 3, 16, 16, RopeLayout::kAdjacent, false},
      {"adjacent, inverse", 5, 3, 16, 16, RopeLayout::kAdjacent, true},
      {"neox, partial", 7, 2, 64, 24, RopeLayout::kNeox, false},
      {"neox, partial, inverse", 7, 2, 64, 24, RopeLayout::kNeox, true},
      {"odd pair count", 1, 4, 20, 10, RopeLayout::kAdjacent, true},
      {"odd pair count, neox", 33, 1, 10, 10, RopeLayout::kNeox, true},
  };
  for (const RopeCase& c : cases) check_against_reference<RopeCase>(c, run_rope, {1e-12});
}

// ---- GLU and its backward ---------------------------------------------------

struct GluCase {
  const char* name;
  int64_t n_tok, n_ff;
  Activation act;
};

Outputs run_glu(TrainOps& ops, const GluCase& c) {
  const std::vector<float> g = random_floats(sz(c.n_tok * c.n_ff), 6, 3.0f), u = random_floats(g.size(), 7);
  const std::vector<float> dh = random_floats(g.size(), 8);
  GuardedFloats h(g.size()), dg(g.size()), du(g.size());
  ops.glu({.g = g.data(), .u = u.data(), .h = h.data(), .n_tok = c.n_tok, .n_ff = c.n_ff, .act = c.act});
  ops.glu_backward({.g = g.data(), .u = u.data(), .dh = dh.data(), .dg = dg.data(), .du = du.data(),
                    .n_tok = c.n_tok, .n_ff = c.n_ff, .act = c.act});
  return {take(h, c.name), take(dg, c.name), take(du, c.name)};
}

TEST(CpuTrainOps, GluAndItsBackward) {
  const GluCase cases[] = {
      {"silu, one", 1, 1, Activation::kSilu},      {"gelu, one", 1, 1, Activation::kGelu},
      {"silu, odd", 3, 37, Activation::kSilu},     {"gelu, odd", 3, 37, Activation::kGelu},
      {"silu, chunks", 9, 5000, Activation::kSilu}, {"gelu, chunks", 9, 5000, Activation::kGelu},
  };
  // h is the forward pass's own GLU (fast_ops.h), whose scalar GELU takes
  // 0.5 x (1 + tanh u) in f32: ~1e-5 relative error where tanh u is near -1,
  // which a one-element case sees whole.
  for (const GluCase& c : cases) check_against_reference<GluCase>(c, run_glu, {1e-8, 1e-11, 1e-12});
}

// ---- Cross-entropy ----------------------------------------------------------

struct CrossEntropyCase {
  const char* name;
  int64_t n_vocab;
  std::vector<int32_t> targets;
  float spread;  // standard deviation of the logits
};

Outputs run_cross_entropy(TrainOps& ops, const CrossEntropyCase& c) {
  const auto n_tok = static_cast<int64_t>(c.targets.size());
  GuardedFloats z = guarded_copy(random_floats(sz(n_tok * c.n_vocab), 9, c.spread));
  std::vector<double> loss(c.targets.size(), -1.0);
  ops.cross_entropy({.logits = z.data(), .targets = c.targets.data(), .loss = loss.data(), .n_tok = n_tok,
                     .n_vocab = c.n_vocab, .grad_scale = 1.0f / static_cast<float>(n_tok)});
  return {take(z, c.name), loss};
}

TEST(CpuTrainOps, CrossEntropy) {
  const std::vector<CrossEntropyCase> cases = {
      {"one word", 1, {0}, 1.0f},
      {"small, one ignored", 10, {3, -1, 9}, 2.0f},
      {"odd vocab", 1001, {0, 1000, 17, -1, 500}, 4.0f},
      {"wide spread", 4099, {4098, 2}, 30.0f},
      {"large vocab", 151936, {151935, 7, -1, 100000}, 3.0f},
  };
  for (const CrossEntropyCase& c : cases) check_against_reference<CrossEntropyCase>(c, run_cross_entropy, {1e-11, 1e-13});
}

// ---- LoRA gradients ---------------------------------------------------------

struct LoraCase {
  const char* name;
  int64_t n_tok, n_in, n_out, rank;
  bool with_dx = true;
};

Outputs run_lora_backward(TrainOps& ops, const LoraCase& c) {
  const std::vector<float> x = random_floats(sz(c.n_tok * c.n_in), 10), dy = random_floats(sz(c.n_tok * c.n_out), 11);
  const std::vector<float> a = random_floats(sz(c.rank * c.n_in), 12, 0.1f);
  const std::vector<float> b = random_floats(sz(c.n_out * c.rank), 13, 0.1f);
  const std::vector<float> u = random_floats(sz(c.n_tok * c.rank), 14);
  ops.reserve({.n_tok = c.n_tok, .n_in_max = std::max(c.n_in, c.n_out)});
  GuardedFloats da = guarded_copy(random_floats(a.size(), 15)), db = guarded_copy(random_floats(b.size(), 16));
  GuardedFloats dx = guarded_copy(random_floats(x.size(), 17));
  ops.lora_backward({.x = x.data(), .u = u.data(), .dy = dy.data(), .a = a.data(), .b = b.data(), .da = da.data(),
                     .db = db.data(), .dx = c.with_dx ? dx.data() : nullptr, .n_tok = c.n_tok, .n_in = c.n_in,
                     .n_out = c.n_out, .rank = c.rank, .scale = 0.75f});
  return {take(da, c.name), take(db, c.name), take(dx, c.name)};
}

TEST(CpuTrainOps, LoraBackward) {
  const LoraCase cases[] = {
      {"tiny", 4, 6, 5, 3},
      {"rank 1, one token", 1, 64, 64, 1},
      {"odd sizes", 97, 300, 129, 16},
      {"rank 256", 7, 100, 70, 256},
      {"no input gradient", 50, 288, 288, 8, false},
      {"past a k chunk", 300, 40, 33, 4},
  };
  for (const LoraCase& c : cases) check_against_reference<LoraCase>(c, run_lora_backward, {1e-10, 1e-10, 1e-10});
}

// ---- AdamW ------------------------------------------------------------------

struct AdamWCase {
  const char* name;
  int64_t n, step;
  float weight_decay;
};

Outputs run_adamw(TrainOps& ops, const AdamWCase& c) {
  const std::vector<float> g = random_floats(sz(c.n), 18);
  GuardedFloats p = guarded_copy(random_floats(sz(c.n), 19));
  GuardedFloats m = guarded_copy(random_floats(sz(c.n), 20, 0.1f));
  std::vector<float> v0 = random_floats(sz(c.n), 21, 0.1f);
  for (float& x : v0) x = x * x;
  GuardedFloats v = guarded_copy(v0);
  ops.adamw({.p = p.data(), .g = g.data(), .m = m.data(), .v = v.data(), .n = c.n, .step = c.step, .lr = 1e-2f,
             .weight_decay = c.weight_decay});
  return {take(p, c.name), take(m, c.name), take(v, c.name)};
}

TEST(CpuTrainOps, AdamW) {
  const AdamWCase cases[] = {{"one parameter", 1, 1, 0.0f}, {"chunks, decay", 40001, 1, 0.1f}, {"later step", 77, 10, 0.01f}};
  for (const AdamWCase& c : cases) check_against_reference<AdamWCase>(c, run_adamw, {1e-13, 1e-13, 1e-13});
}

}  // namespace
}  // namespace sluice::cpu
