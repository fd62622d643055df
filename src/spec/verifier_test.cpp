// Exactness of speculative verification on the real stories260K model.
//
// The statistical tests draw many verified tokens for a fixed context and
// compare their frequencies with the target's exact distribution by a
// chi-square test at significance 1e-3 (fixed seeds: deterministic, not flaky).
// A deliberately broken verifier (accepting every draft) must fail the same test,
// so the test can tell a right verifier from a wrong one.
#include "spec/verifier.h"

#include <cmath>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "base/test_data.h"
#include "model/model.h"
#include "spec/chi_square_test_util.h"
#include "tokenizer/tokenizer.h"

namespace sluice::spec {
namespace {

using ::sluice::testing::shipped_model_path;

using testing::chi_square_excess;

// Verifier that accepts every draft: wrong on purpose.
Verdict accept_all(Sampler& sampler, const float* target_logits, std::span<const int32_t> draft, const float*,
                   float*) {
  for (const int32_t d : draft) sampler.accept(d);
  Verdict v{.n_accepted = static_cast<int32_t>(draft.size())};
  v.token = sampler.sample(target_logits + static_cast<int64_t>(draft.size()) * sampler.n_vocab());
  sampler.accept(v.token);
  return v;
}

class VerifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = shipped_model_path("stories260K.gguf");
    auto mf = open_model_file(path);
    ASSERT_TRUE(mf.ok());
    auto file = std::make_shared<const ModelFile>(std::move(*mf));
    tok_ = std::move(Tokenizer::from_metadata(file->metadata).value());
    model_ = std::move(Model::load(file, ModelOptions{.n_threads = 1}).value());
    n_vocab_ = model_->hparams().n_vocab;
    // A context with a spread-out next token.
    prompt_ = tok_->encode("Once upon a time, there was a little", true);
    row0_ = logits_after(prompt_);
  }

  std::vector<float> logits_after(const std::vector<int32_t>& tokens) {
    KvCache kv = model_->make_kv_cache(static_cast<int64_t>(tokens.size()) + 1);
    std::vector<float> out(static_cast<size_t>(n_vocab_));
    EXPECT_TRUE(model_->forward(tokens, kv, out.data(), false).ok());
    return out;
  }
  // Row 1 for draft d: the logits after prompt + d (cached).
  const std::vector<float>& row1(int32_t d) {
    auto it = rows1_.find(d);
    if (it != rows1_.end()) return it->second;
    std::vector<int32_t> t = prompt_;
    t.push_back(d);
    return rows1_[d] = logits_after(t);
  }
  Sampler target_sampler(const SamplingParams& p, uint64_t seed) {
    SamplingParams sp = p;
    sp.seed = seed;
    Sampler s(sp, static_cast<int32_t>(n_vocab_));
    for (const int32_t t : prompt_) s.accept(t);
    return s;
  }
  // The exact distribution the target draws its next token from.
  std::vector<double> exact(const SamplingParams& p, const std::vector<int32_t>& extra, const float* logits) {
    Sampler s = target_sampler(p, 0);
    for (const int32_t t : extra) s.accept(t);
    std::vector<float> probs(static_cast<size_t>(n_vocab_));
    s.distribution(logits, probs.data());
    return std::vector<double>(probs.begin(), probs.end());
  }

  using VerifyFn = Verdict (*)(Sampler&, const float*, std::span<const int32_t>, const float*, float*);
  struct Counts {
    std::vector<int64_t> first;        // [n_vocab] first emitted token
    std::vector<int64_t> second;       // [n_vocab] second token after first == `given`
    int64_t n_second = 0;
    int64_t n_accepted = 0;
  };
  // n trials of one-draft verification. The draft is drawn from `draft_params`
  // on the same logits (a different distribution), or fixed at `fixed` if >= 0.
  Counts run(VerifyFn fn, const SamplingParams& target, const SamplingParams& draft_params, int32_t fixed,
             int32_t given, int64_t n) {
    Counts c{.first = std::vector<int64_t>(static_cast<size_t>(n_vocab_)),
             .second = std::vector<int64_t>(static_cast<size_t>(n_vocab_))};
    std::vector<float> q(static_cast<size_t>(n_vocab_)), scratch(static_cast<size_t>(n_vocab_));
    std::vector<float> rows(static_cast<size_t>(2 * n_vocab_));
    SamplingParams dp = draft_params;
    dp.seed = 777;
    Sampler drafter(dp, static_cast<int32_t>(n_vocab_));
    for (int64_t i = 0; i < n; ++i) {
      Sampler s = target_sampler(target, 1000 + static_cast<uint64_t>(i));
      int32_t d = fixed;
      const float* qp = nullptr;
      if (fixed < 0) {
        drafter.distribution(row0_.data(), q.data());
        d = drafter.sample_from(q.data());
        qp = q.data();
      }
      std::copy(row0_.begin(), row0_.end(), rows.begin());
      const std::vector<float>& r1 = row1(d);
      std::copy(r1.begin(), r1.end(), rows.begin() + n_vocab_);
      const std::vector<int32_t> draft = {d};
      const Verdict v = fn(s, rows.data(), draft, qp, scratch.data());
      EXPECT_TRUE(v.n_accepted == 0 || v.n_accepted == 1);
      EXPECT_TRUE(v.token >= 0 && v.token < n_vocab_);
      c.n_accepted += v.n_accepted;
      const int32_t first = v.n_accepted == 1 ? d : v.token;
      ++c.first[static_cast<size_t>(first)];
      if (v.n_accepted == 1 && first == given) {
        ++c.second[static_cast<size_t>(v.token)];
        ++c.n_second;
      }
    }
    return c;
  }
  int32_t most_likely(const std::vector<double>& p) const {
    return static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Model> model_;
  int64_t n_vocab_ = 0;
  std::vector<int32_t> prompt_;
  std::vector<float> row0_;
  std::map<int32_t, std::vector<float>> rows1_;
};

TEST_F(VerifierTest, GreedyAcceptsExactlyTheArgmaxPrefix) {
  const SamplingParams greedy{.temperature = 0};
  Sampler ref = target_sampler(greedy, 1);
  const int32_t t1 = ref.sample(row0_.data());
  const int32_t t2 = ref.sample(row1(t1).data());
  std::vector<float> rows(row0_);
  rows.insert(rows.end(), row1(t1).begin(), row1(t1).end());
  std::vector<float> scratch(static_cast<size_t>(n_vocab_));
  {
    Sampler s = target_sampler(greedy, 1);
    const std::vector<int32_t> draft = {t1};
    const Verdict v = verify(s, rows.data(), draft, nullptr, scratch.data());
    EXPECT_EQ(v.n_accepted, 1);
    EXPECT_EQ(v.token, t2);  // the bonus token
  }
  {
    Sampler s = target_sampler(greedy, 1);
    const std::vector<int32_t> draft = {(t1 + 1) % static_cast<int32_t>(n_vocab_)};
    const Verdict v = verify(s, rows.data(), draft, nullptr, scratch.data());
    EXPECT_EQ(v.n_accepted, 0);
    EXPECT_EQ(v.token, t1);  // the correction is the target's argmax
  }
}

TEST_F(VerifierTest, SampledDraftsKeepTheTargetDistribution) {
  // Target: temperature 1 with top-p 0.9 and a repetition penalty; draft: a
  // flatter distribution (temperature 1.6, no top-p, no penalty).
  const SamplingParams target{.temperature = 1.0f, .top_p = 0.9f, .repeat_penalty = 1.3f};
  const SamplingParams draft{.temperature = 1.6f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  const std::vector<double> p1 = exact(target, {}, row0_.data());
  const int32_t given = most_likely(p1);
  const std::vector<double> p2 = exact(target, {given}, row1(given).data());
  const int64_t n = 20000;
  const Counts good = run(&verify, target, draft, -1, given, n);
  EXPECT_GT(good.n_accepted, n / 10);  // both paths (accept, residual) are exercised
  EXPECT_LT(good.n_accepted, n - n / 10);
  EXPECT_LE(chi_square_excess(good.first, p1, n), 0.0) << "first token";
  ASSERT_GT(good.n_second, 500);
  EXPECT_LE(chi_square_excess(good.second, p2, good.n_second), 0.0) << "bonus token";

  const Counts broken = run(&accept_all, target, draft, -1, given, n);
  EXPECT_GT(chi_square_excess(broken.first, p1, n), 0.0) << "an accept-everything verifier must fail";
}

TEST_F(VerifierTest, DeterministicDraftsKeepTheTargetDistribution) {
  // Prompt-lookup style: the same fixed draft every time, with top-k and min-p.
  const SamplingParams target{.temperature = 0.9f, .top_k = 40, .min_p = 0.02f};
  const std::vector<double> p1 = exact(target, {}, row0_.data());
  const int32_t fixed = most_likely(p1);
  const std::vector<double> p2 = exact(target, {fixed}, row1(fixed).data());
  const int64_t n = 20000;
  const Counts good = run(&verify, target, {}, fixed, fixed, n);
  EXPECT_LE(chi_square_excess(good.first, p1, n), 0.0);
  ASSERT_GT(good.n_second, 500);
  EXPECT_LE(chi_square_excess(good.second, p2, good.n_second), 0.0);
  const Counts broken = run(&accept_all, target, {}, fixed, fixed, n);
  EXPECT_GT(chi_square_excess(broken.first, p1, n), 0.0);
}

}  // namespace
}  // namespace sluice::spec
