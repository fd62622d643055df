#include "model/synth.h"

#include <set>
#include <unistd.h>

#include "format/model_file.h"

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

// A mix falls back per tensor, as llama.cpp's quantizer does, where a row does
// not split into 256-element super-blocks (Qwen1.5-MoE's experts: 1408 wide);
// the plain K type has no fallback and is refused with the dims.
TEST(Synth, MixesFallBackWhereRowsDoNotSplitIntoSuperBlocks) {
  SynthShape shape = synth_preset("tiny-qwen2moe", 2).value();
  shape.n_vocab = 512;
  shape.n_ff_expert = 352;  // 11 x 32, not a multiple of 256
  const std::string path = ::testing::TempDir() + "/synth_fallback_" + std::to_string(getpid()) + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = "q4_k_m", .n_threads = 1}, path);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  int n_down = 0;
  for (const TensorInfo& t : mf->tensors) {
    if (t.name.find("ffn_down_exps") != std::string::npos) {
      ++n_down;  // Q4_K falls back to Q5_0, and Q6_K (promoted layers) to Q8_0
      EXPECT_TRUE(t.type == DType::kQ5_0 || t.type == DType::kQ8_0) << t.name << " " << dtype_traits(t.type).name;
    } else if (t.name.find("ffn_gate_exps") != std::string::npos) {
      EXPECT_EQ(t.type, DType::kQ4_K) << t.name;  // rows of 256: no fallback
    }
  }
  EXPECT_EQ(n_down, 2);
  std::remove(path.c_str());
  auto plain = write_synth_model(SynthOptions{.shape = shape, .type = "q4_k", .n_threads = 1}, path);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("expert ffn 352"), std::string::npos) << plain.status().message();
}

}  // namespace
}  // namespace sluice
