// The draft-model proposer on the real stories260K model, drafting for itself.
#include "spec/draft_model.h"

#include <gtest/gtest.h>

#include "base/test_data.h"
#include "kv/block_manager.h"
#include "model/generate.h"
#include "model/synth.h"

namespace sluice::spec {
namespace {

using testing::model_path;
using testing::shipped_model_path;

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = shipped_model_path("stories260K.gguf");
    auto mf = open_model_file(path_);
    ASSERT_TRUE(mf.ok());
    file_ = std::make_shared<const ModelFile>(std::move(*mf));
    tok_ = std::move(Tokenizer::from_metadata(file_->metadata).value());
    model_ = std::move(Model::load(file_, ModelOptions{.n_threads = 1}).value());
  }
  // The model's own greedy continuation.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int n) {
    KvCache kv = model_->make_kv_cache(static_cast<int64_t>(prompt.size()) + n + 1);
    Sampler s(SamplingParams{.temperature = 0}, static_cast<int32_t>(model_->hparams().n_vocab));
    auto r = generate(*model_, kv, prompt, s, GenerateParams{.n_predict = n});
    EXPECT_TRUE(r.ok());
    return r->tokens;
  }

  std::string path_;
  std::shared_ptr<const ModelFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Model> model_;
};

TEST_F(DraftModelTest, GreedyDraftsAreTheModelsOwnContinuationAcrossRollbacks) {
  auto d = DraftModel::create({.path = path_, .n_threads = 1, .n_batch = 8, .max_seqs = 4, .n_ctx = 128}, *tok_);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE((*d)->draws_from_sampler());
  // Two sequences; one prompt longer than the batch (its catch-up is split).
  std::vector<int32_t> a = tok_->encode("Once upon a time, there was a little girl named Lily. She", true);
  std::vector<int32_t> b = tok_->encode("The cat", true);
  ASSERT_GT(a.size(), 8u);
  std::vector<int32_t> da, db;
  std::vector<DraftTask> tasks = {{.seq = 1, .tokens = a, .max_draft = 5, .draft = &da},
                                  {.seq = 2, .tokens = b, .max_draft = 3, .draft = &db}};
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_EQ(da, greedy(a, 5));
  EXPECT_EQ(db, greedy(b, 3));

  // Accept two of a's drafts plus a token of another choice; b unchanged.
  a.insert(a.end(), da.begin(), da.begin() + 2);
  a.push_back((da[2] + 1) % tok_->n_vocab());
  tasks[0].tokens = a;
  tasks[1].tokens = b;
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_EQ(da, greedy(a, 5));
  EXPECT_EQ(db, greedy(b, 3));

  // A rollback far into the prompt (as after preemption with other tokens).
  a.resize(4);
  tasks[0].tokens = a;
  ASSERT_TRUE((*d)->propose(std::span<DraftTask>(tasks).first(1)).ok());
  EXPECT_EQ(da, greedy(a, 5));
  (*d)->release(1);
  (*d)->release(2);
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_EQ(da, greedy(a, 5));
}

TEST_F(DraftModelTest, SampledDraftsComeWithTheirDistribution) {
  auto d = DraftModel::create({.path = path_, .n_threads = 1, .max_seqs = 2, .n_ctx = 64}, *tok_);
  ASSERT_TRUE(d.ok());
  const int64_t V = tok_->n_vocab();
  Sampler s(SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 0.9f, .min_p = 0, .seed = 3},
            static_cast<int32_t>(V));
  std::vector<int32_t> t = tok_->encode("Once upon a time", true), draft;
  std::vector<float> probs(static_cast<size_t>(4 * V), -1.0f);
  std::vector<DraftTask> tasks = {{.seq = 7, .tokens = t, .max_draft = 4, .sampler = &s, .draft = &draft,
                                   .probs = probs.data()}};
  ASSERT_TRUE((*d)->propose(tasks).ok());
  ASSERT_EQ(draft.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += probs[i * V + v];
    EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << i;
    EXPECT_GT(probs[i * V + draft[i]], 0.0f) << "draft " << i << " was drawn from its row";
  }
}

TEST_F(DraftModelTest, FullPoolGivesEmptyDraftsAndMismatchedVocabulariesAreRefused) {
  // 2 blocks of 16 tokens: a 40-token sequence cannot be cached.
  auto d = DraftModel::create({.path = path_, .n_threads = 1, .max_seqs = 2, .n_ctx = 64, .kv_tokens = 32}, *tok_);
  ASSERT_TRUE(d.ok());
  std::vector<int32_t> t(40, 5), draft = {1};
  std::vector<DraftTask> tasks = {{.seq = 1, .tokens = t, .max_draft = 3, .draft = &draft}};
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_TRUE(draft.empty());
  t.resize(10);
  tasks[0].tokens = t;
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_EQ(draft.size(), 3u);

  const std::string other = model_path("vocab/ggml-vocab-llama-spm.gguf");
  if (!::sluice::testing::path_exists(other)) GTEST_SKIP() << "vocab-only GGUF absent: " << other;
  auto vf = open_model_file(other);
  ASSERT_TRUE(vf.ok());
  auto big = Tokenizer::from_metadata(vf->metadata);
  ASSERT_TRUE(big.ok());
  auto bad = DraftModel::create({.path = path_, .n_ctx = 64}, **big);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vocabulary"), std::string::npos) << bad.status().message();
  auto missing = DraftModel::create({.path = "/nonexistent.gguf"}, *tok_);
  EXPECT_FALSE(missing.ok());
}

// A draft model whose two layers both attend over a window of 32 positions
// (blocks of 16), drafting for itself through a long generation with rollbacks:
// its drafts are those of a full-cache run of the same model, and its blocks in
// use stay at the window's (they would grow with every 16 tokens otherwise).
TEST(DraftModelWindow, BlocksStayFlatInALongGenerationAndDraftsAreUnchanged) {
  SynthShape shape{.name = "swa-draft", .n_vocab = 512, .n_embd = 128, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                   .n_ff = 256, .n_ctx = 1024};
  shape.n_swa = 32;
  const std::string path = ::testing::TempDir() + "/draft_model_window.gguf";
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = shape, .type = "f32", .seed = 5, .n_threads = 1}, path).ok());
  auto mf = open_model_file(path);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  auto tok = Tokenizer::from_metadata(file->metadata);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto ref = Model::load(file, ModelOptions{.n_threads = 1, .n_batch = 64});
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ((*ref)->hparams().kv_window(), 32);
  // The reference: greedy continuation with a contiguous cache holding every position.
  auto greedy = [&](const std::vector<int32_t>& prompt, int n) {
    KvCache kv = (*ref)->make_kv_cache(static_cast<int64_t>(prompt.size()) + n + 1);
    Sampler s(SamplingParams{.temperature = 0}, static_cast<int32_t>((*ref)->hparams().n_vocab));
    auto r = generate(**ref, kv, prompt, s, GenerateParams{.n_predict = n});
    EXPECT_TRUE(r.ok());
    return r->tokens;
  };

  auto d = DraftModel::create({.path = path, .n_threads = 1, .n_batch = 64, .max_seqs = 2, .n_ctx = 512}, **tok);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_NE((*d)->describe().find("sliding window 32"), std::string::npos) << (*d)->describe();
  const int32_t k = 4;
  const int64_t bound = kv_window_blocks(32 + k - 1, 16);  // the window plus the drafts in flight: 4 blocks
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20; ++i) tokens.push_back(static_cast<int32_t>((i * 37 + 5) % 512));
  std::vector<int32_t> draft;
  int64_t peak = 0, n_rounds = 0;
  for (int round = 0; tokens.size() < 400; ++round, ++n_rounds) {
    std::vector<DraftTask> tasks = {{.seq = 1, .tokens = tokens, .max_draft = k, .draft = &draft}};
    ASSERT_TRUE((*d)->propose(tasks).ok()) << "round " << round;
    ASSERT_EQ(draft, greedy(tokens, k)) << "round " << round << " at " << tokens.size() << " tokens";
    peak = std::max(peak, (*d)->kv_stats().n_used);
    // Accept 0..3 drafts, then a token of another choice every third round (the
    // next round rolls the cache back over the rejected drafts).
    const int j = round % k;
    tokens.insert(tokens.end(), draft.begin(), draft.begin() + j);
    tokens.push_back(round % 3 == 0 ? (draft[static_cast<size_t>(j)] + 1) % 512 : draft[static_cast<size_t>(j)]);
  }
  EXPECT_GT(n_rounds, 100);
  EXPECT_LE(peak, bound) << "blocks in use grew past the window over " << tokens.size() << " tokens";
  // A rollback far behind the released blocks starts the sequence over.
  tokens.resize(30);
  std::vector<DraftTask> tasks = {{.seq = 1, .tokens = tokens, .max_draft = k, .draft = &draft}};
  ASSERT_TRUE((*d)->propose(tasks).ok());
  EXPECT_EQ(draft, greedy(tokens, k));
  EXPECT_LE((*d)->kv_stats().n_used, bound);
}

}  // namespace
}  // namespace sluice::spec
