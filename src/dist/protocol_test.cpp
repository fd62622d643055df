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

// One long prompt and a short one, cut for 4 micro-batches: the prompt's
// pieces cover it in order at consecutive positions, its logits in the last
// piece; split_micro_batches then ends its groups at the cuts, a quarter of
// the tokens each.
TEST(Protocol, CutSequencesLetsMicroBatchesEndInsideAPrompt) {
  std::vector<int32_t> prompt(96), other(4);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i);
  const std::vector<int32_t> table = {7, 3, 9};
  const std::vector<ForwardSeq> seqs = {{.tokens = prompt, .pos0 = 10, .block_table = table, .n_logits = 1, .loras = 2},
                                        {.tokens = other, .pos0 = 0, .n_logits = 1}};
  std::vector<ForwardSeq> pieces;
  cut_sequences(seqs, 4, 16, &pieces);
  ASSERT_EQ(pieces.size(), 5u);  // the prompt cut at 25, 50 and 75 of the 100 tokens; the short one whole
  int64_t pos = 10;
  for (size_t i = 0; i < 4; ++i) {
    const ForwardSeq& p = pieces[i];
    EXPECT_EQ(p.pos0, pos);
    EXPECT_EQ(p.tokens.data(), prompt.data() + (pos - 10));
    EXPECT_EQ(p.block_table.data(), table.data());
    EXPECT_EQ(p.loras, 2u);
    EXPECT_EQ(p.n_logits, i == 3 ? 1 : 0);
    pos += static_cast<int64_t>(p.tokens.size());
  }
  EXPECT_EQ(pos, 10 + 96);
  EXPECT_EQ(pieces[0].tokens.size(), 25u);
  EXPECT_EQ(pieces[1].tokens.size(), 25u);
  EXPECT_EQ(pieces[2].tokens.size(), 25u);
  EXPECT_EQ(pieces[4].tokens.data(), other.data());
  std::vector<int32_t> ends;
  split_micro_batches(pieces, 4, &ends);
  EXPECT_EQ(ends, (std::vector<int32_t>{1, 2, 3, 5}));

  // The logits' tokens are never cut; nor past max_pieces.
  const std::vector<ForwardSeq> verify = {{.tokens = prompt, .n_logits = 80}};
  cut_sequences(verify, 4, 16, &pieces);
  EXPECT_EQ(pieces.size(), 1u);  // the cuts at 24, 48 and 72 all fall in the last 80 tokens
  cut_sequences(seqs, 4, 2, &pieces);
  EXPECT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].tokens.size(), 96u);
}

}  // namespace
}  // namespace sluice::dist
