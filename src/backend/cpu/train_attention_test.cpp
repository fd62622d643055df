// Training attention on the CPU against the reference's (double sums, whole
// softmax rows): one token, sequences shorter and longer than a tile (48
// queries, 64 keys), several sequences in one call, GQA ratios 1, 2 and 4,
// windows, soft-capping, head sizes that are not a multiple of the register
// tile. Forward (out, lse) and backward (dq, dk, dv) of the same case.
//
// Error bounds: f32 sums of at most a few hundred terms and a vector e^x of
// ~2 ulp give normalized squared errors of ~1e-13 forward and ~1e-12 back;
// 1e-9 and 1e-8 leave room.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/train_attention.h"
#include "backend/cpu/train_test_util.h"

namespace sluice::cpu {
namespace {

using testing::check_against_reference;
using testing::GuardedFloats;
using testing::Outputs;
using testing::random_floats;
using testing::take;

constexpr double kForwardBound = 1e-9;
constexpr double kBackwardBound = 1e-8;

struct AttentionCase {
  const char* name;
  std::vector<TrainSeq> seqs;
  int64_t n_head, n_head_kv, head_dim;
  int64_t window = 0;
  float softcap = 0.0f;
};

int64_t total_tokens(const AttentionCase& c) {
  int64_t n = 0;
  for (const TrainSeq& s : c.seqs) n = std::max(n, s.tok0 + s.n_tok);
  return n;
}

Outputs run_attention(TrainOps& ops, const AttentionCase& c) {
  const int64_t n_tok = total_tokens(c);
  const int64_t nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim;
  int64_t n_ctx = 0;
  for (const TrainSeq& s : c.seqs) n_ctx = std::max(n_ctx, s.n_tok);
  ops.reserve({.n_tok = n_tok, .n_ctx = n_ctx, .n_head = c.n_head, .head_dim = c.head_dim, .n_in_max = nq});
  const std::vector<float> q = random_floats(static_cast<size_t>(n_tok * nq), 1);
  const std::vector<float> k = random_floats(static_cast<size_t>(n_tok * nkv), 2);
  const std::vector<float> v = random_floats(static_cast<size_t>(n_tok * nkv), 3);
  const std::vector<float> dout = random_floats(static_cast<size_t>(n_tok * nq), 4);
  GuardedFloats out(static_cast<size_t>(n_tok * nq)), lse(static_cast<size_t>(n_tok * c.n_head));
  const TrainAttentionArgs a{.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data(), .lse = lse.data(),
                             .seqs = c.seqs, .n_head = c.n_head, .n_head_kv = c.n_head_kv,
                             .head_dim = c.head_dim, .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                             .window = c.window, .softcap = c.softcap};
  ops.attention(a);
  GuardedFloats dq(q.size()), dk(k.size()), dv(v.size());
  ops.attention_backward({.fwd = a, .dout = dout.data(), .dq = dq.data(), .dk = dk.data(), .dv = dv.data()});
  return {take(out, c.name), take(lse, c.name), take(dq, c.name), take(dk, c.name), take(dv, c.name)};
}

const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = {
      {"one token", {{0, 1}}, 2, 1, 8},
      {"two short sequences", {{0, 5}, {5, 3}}, 4, 2, 4},
      {"past a tile, no GQA", {{0, 150}}, 2, 2, 64},
      {"past a tile, GQA 2", {{0, 150}}, 4, 2, 40},
      {"past a tile, GQA 4", {{0, 130}}, 4, 1, 72},
      {"several sequences", {{0, 70}, {70, 131}, {201, 1}}, 4, 2, 16},
      {"window", {{0, 150}}, 2, 1, 32, 20},
      {"window of one", {{0, 70}}, 2, 2, 8, 1},
      {"window wider than a tile", {{0, 200}}, 2, 1, 16, 100},
      {"softcap", {{0, 110}}, 4, 2, 24, 0, 5.0f},
      {"window and softcap", {{3, 97}}, 2, 1, 128, 33, 2.0f},
  };
  return cases;
}

TEST(CpuTrainAttention, MatchesTheReference) {
  for (const AttentionCase& c : attention_cases()) {
    check_against_reference<AttentionCase>(
        c, run_attention, {kForwardBound, kForwardBound, kBackwardBound, kBackwardBound, kBackwardBound});
  }
}

// Rows outside every sequence are not part of any call: a sequence's results
// do not depend on what the rows around it hold or on the other sequences.
TEST(CpuTrainAttention, SequencesAreIndependent) {
  const int64_t hd = 16, nh = 2, nkv = 1, n = 60;
  for (Isa isa : testing::train_isas()) {
    CpuBackend be({.n_threads = 2, .isa = isa});
    TrainOps& ops = *be.train_ops();
    ops.reserve({.n_tok = 2 * n, .n_ctx = n, .n_head = nh, .head_dim = hd, .n_in_max = nh * hd});
    const std::vector<float> q = random_floats(static_cast<size_t>(2 * n * nh * hd), 5);
    const std::vector<float> k = random_floats(static_cast<size_t>(2 * n * nkv * hd), 6);
    const std::vector<float> v = random_floats(static_cast<size_t>(2 * n * nkv * hd), 7);
    std::vector<float> out_both(q.size()), lse_both(static_cast<size_t>(2 * n * nh));
    std::vector<float> out_one(q.size()), lse_one(lse_both.size());
    const std::vector<TrainSeq> both = {{0, n}, {n, n}}, second = {{n, n}};
    TrainAttentionArgs a{.q = q.data(), .k = k.data(), .v = v.data(), .out = out_both.data(), .lse = lse_both.data(),
                         .seqs = both, .n_head = nh, .n_head_kv = nkv, .head_dim = hd, .scale = 0.25f};
    ops.attention(a);
    a.out = out_one.data();
    a.lse = lse_one.data();
    a.seqs = second;
    ops.attention(a);
    for (size_t i = static_cast<size_t>(n * nh * hd); i < q.size(); ++i) ASSERT_EQ(out_one[i], out_both[i]) << i;
  }
}

}  // namespace
}  // namespace sluice::cpu
