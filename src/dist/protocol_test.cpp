#include "dist/protocol.h"

#include <gtest/gtest.h>

#include "kv/kv_store.h"

namespace sluice::dist {
namespace {

TEST(Protocol, StepRoundTrips) {
  const std::vector<int32_t> t0{5, 6, 7}, t1{9}, b0{3, 4}, b1{8};
  const ForwardSeq seqs[2] = {{.tokens = t0, .pos0 = 16, .block_table = b0, .n_logits = 1},
                              {.tokens = t1, .pos0 = 2, .block_table = b1, .n_logits = 0}};
  const int32_t ends[2] = {1, 2};
  const BlockCopy copies[1] = {{.src = 3, .dst = 7}};
  auto kv = KvStore::create({.n_layer = 2, .n_embd_kv = 8, .block_size = 16, .dtype = KvDtype::kF32, .n_head_kv = 1}, 9);
  ASSERT_TRUE(kv.ok());
  std::vector<uint8_t> msg;
  encode_step(seqs, ends, copies, *kv, &msg);
  auto v = decode_step(msg);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->h.n_tokens, 4);
  EXPECT_EQ(v->h.kv_blocks, 9);
  ASSERT_EQ(v->seqs.size(), 2u);
  EXPECT_EQ(v->seqs[0].pos0, 16);
  EXPECT_EQ(v->seqs[1].n_logits, 0);
  EXPECT_EQ(std::vector<int32_t>(v->tokens.begin(), v->tokens.end()), (std::vector<int32_t>{5, 6, 7, 9}));
  EXPECT_EQ(std::vector<int32_t>(v->tables.begin(), v->tables.end()), (std::vector<int32_t>{3, 4, 8}));
  EXPECT_EQ(std::vector<int32_t>(v->copies.begin(), v->copies.end()), (std::vector<int32_t>{3, 7}));
  EXPECT_EQ(std::vector<int32_t>(v->micro_ends.begin(), v->micro_ends.end()), (std::vector<int32_t>{1, 2}));
  // Truncated or lying messages are refused, not read past their end.
  for (size_t cut : {size_t{0}, size_t{10}, msg.size() - 1}) {
    EXPECT_FALSE(decode_step(std::span(msg.data(), cut)).ok()) << cut;
  }
  std::vector<uint8_t> bad = msg;
  reinterpret_cast<StepHeader*>(bad.data())->n_tokens = 5;
  EXPECT_FALSE(decode_step(bad).ok());
  encode_shutdown(&msg);
  auto s = decode_step(msg);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->h.kind, static_cast<int32_t>(StepKind::kShutdown));
}

TEST(Protocol, MicroBatchesSplitByTokensKeepOrderAndCoverAll) {
  std::vector<std::vector<int32_t>> toks{{1}, {1, 1, 1, 1}, {1}, {1}, {1, 1}};
  std::vector<ForwardSeq> seqs;
  for (const auto& t : toks) seqs.push_back({.tokens = t});
  std::vector<int32_t> ends;
  for (int64_t m = 1; m <= 7; ++m) {
    split_micro_batches(seqs, m, &ends);
    ASSERT_EQ(static_cast<int64_t>(ends.size()), std::min<int64_t>(m, 5)) << m;
    EXPECT_EQ(ends.back(), 5);
    for (size_t i = 1; i < ends.size(); ++i) EXPECT_GT(ends[i], ends[i - 1]);
    EXPECT_GT(ends[0], 0);
  }
  split_micro_batches(seqs, 2, &ends);
  EXPECT_EQ(ends, (std::vector<int32_t>{2, 5}));  // 5 tokens, then 4
}

}  // namespace
}  // namespace sluice::dist
