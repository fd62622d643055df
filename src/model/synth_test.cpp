#include "model/synth.h"

#include <set>

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Synth, VocabularyIsExactSizeWithUniquePiecesAndByteFallback) {
  for (int64_t n : {512, 4096, 32000, 128256}) {
    const SynthVocab v = synth_vocab(n);
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n);
    ASSERT_EQ(v.scores.size(), v.tokens.size());
    ASSERT_EQ(v.types.size(), v.tokens.size());
    const std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
    EXPECT_EQ(static_cast<int64_t>(unique.size()), n) << "duplicate pieces at n_vocab " << n;
    EXPECT_EQ(v.tokens[1], "<s>");
    EXPECT_EQ(v.tokens[3 + 0x41], "<0x41>");
    EXPECT_EQ(v.types[3 + 0x41], 6);
  }
}

TEST(Synth, PresetsHaveTheirRealShapesAndUnknownOnesAreRefused) {
  auto p = synth_preset("8b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_embd, 4096);
  EXPECT_EQ(p->n_head_kv, 8);
  EXPECT_EQ(p->n_vocab, 128256);
  auto s = synth_preset("70b-slice", 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_layer, 3);
  EXPECT_EQ(s->n_ff, 28672);
  EXPECT_FALSE(synth_preset("3t").ok());
}

TEST(Synth, MistralPresetsCarryTheirSlidingWindow) {
  auto m = synth_preset("mistral-7b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->n_swa, 4096);
  EXPECT_EQ(m->n_ff, 14336);
  EXPECT_EQ(m->n_head_kv, 8);
  auto t = synth_preset("tiny-mistral");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->n_swa, 64);
  EXPECT_EQ(synth_preset("tiny")->n_swa, 0);
}

}  // namespace
}  // namespace sluice
