// Training attention on the CPU beyond the op-case list
// (op_cases_train_attention_test.cpp: against the reference, at every level in
// train_levels_test.cpp): a sequence's results do not depend on the rows
// around it or on the other sequences of the call.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/train_attention.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_test_util.h"

namespace sluice::cpu {
namespace {

using testing::random_floats;

// Rows outside every sequence are not part of any call: a sequence's results
// do not depend on what the rows around it hold or on the other sequences.
TEST(CpuTrainAttention, SequencesAreIndependent) {
  const int64_t hd = 16, nh = 2, nkv = 1, n = 60;
  for (Isa isa : testing::supported_isas()) {
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
