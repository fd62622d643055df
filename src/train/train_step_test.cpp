// A training step against the float64 PyTorch reference of
// ../shared/models/stories260K-lora (reference.json's conventions): the loss
// and every LoRA gradient at the init adapter, and 30 AdamW steps.
#include "train/train_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/reference_backend.h"
#include "base/test_data.h"
#include "format/model_file.h"

namespace sluice {
namespace {

using testing::model_path;

const std::string kDir = model_path("stories260K-lora");
const std::string kBase = testing::shipped_model_path("stories260K.gguf");

nlohmann::json reference() {
  std::ifstream in(kDir + "/reference.json");
  return nlohmann::json::parse(in);
}

// BOS + 64 tokens per row: inputs are tokens 0..63, targets 1..64.
TrainBatch batch_of(const nlohmann::json& ids) {
  TrainBatch b;
  for (const auto& row : ids) {
    const auto seq = row.get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(seq.size()) - 1;
    b.seqs.push_back({static_cast<int64_t>(b.tokens.size()), n});
    b.tokens.insert(b.tokens.end(), seq.begin(), seq.end() - 1);
    b.targets.insert(b.targets.end(), seq.begin() + 1, seq.end());
  }
  return b;
}

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraParams> params;
  std::unique_ptr<TrainStep> step;
};

Fixture make(std::shared_ptr<Backend> be) {
  Fixture f;
  auto mf = open_model_file(kBase);
  EXPECT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)),
                       {.n_batch = 1, .max_seqs = 1, .backend = std::move(be), .repack = false});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  f.model = std::move(*m);
  auto ad = read_lora(kDir + "/lora-init.gguf");
  EXPECT_TRUE(ad.ok());
  auto p = LoraParams::create(f.model->backend(), *ad);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  f.params = std::make_unique<LoraParams>(std::move(*p));
  auto st = TrainStep::create(*f.model, *f.params, {.max_tokens = 256, .max_seq = 64});
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  f.step = std::move(*st);
  return f;
}

void check_init_gradients(Fixture& f, const nlohmann::json& ref) {
  const TrainBatch b = batch_of(ref["train_ids"]);
  ASSERT_EQ(b.n_counted(), 256);
  f.params->zero_grads();
  auto loss = f.step->accumulate(b, 1.0f / 256);
  ASSERT_TRUE(loss.ok()) << loss.status().to_string();
  const double want = ref["loss_init"].get<double>();
  EXPECT_NEAR(*loss / 256, want, 1e-5 * want);
  // Every gradient element within 1e-4 of its tensor's largest reference element.
  double worst = 0;
  for (const LoraSlot& s : f.params->slots()) {
    for (const bool is_a : {true, false}) {
      const auto& g = ref["grads"][s.base_name + (is_a ? ".lora_a" : ".lora_b")];
      const auto data = g["data"].get<std::vector<double>>();
      const float* got = is_a ? f.params->grad_a(s) : f.params->grad_b(s);
      double amax = 0, dmax = 0;
      for (double d : data) amax = std::max(amax, std::fabs(d));
      for (size_t i = 0; i < data.size(); ++i) dmax = std::max(dmax, std::fabs(got[i] - data[i]));
      worst = std::max(worst, dmax / amax);
      EXPECT_LE(dmax, 1e-4 * amax) << s.base_name << (is_a ? " A" : " B");
    }
  }
  ::testing::Test::RecordProperty("grad_max_rel_err", std::to_string(worst));
}

TEST(TrainStep, LossAndGradientsAtInitMatchTheReference) {
  SKIP_UNLESS_EXISTS(kDir + "/reference.json");
  const auto ref = reference();
  Fixture f = make(std::make_shared<ReferenceBackend>());
  check_init_gradients(f, ref);
}

TEST(TrainStep, ThirtyAdamWStepsFollowTheReference) {
  SKIP_UNLESS_EXISTS(kDir + "/reference.json");
  const auto ref = reference();
  Fixture f = make(std::make_shared<ReferenceBackend>());
  const TrainBatch b = batch_of(ref["train_ids"]);
  const auto want = ref["train_loss"].get<std::vector<double>>();
  TrainOps& ops = *f.model->backend().train_ops();
  for (size_t t = 0; t < want.size(); ++t) {
    f.params->zero_grads();
    auto loss = f.step->accumulate(b, 1.0f / 256);
    ASSERT_TRUE(loss.ok());
    EXPECT_NEAR(*loss / 256, want[t], 1e-4) << "step " << t;
    ops.adamw({.p = f.params->params(), .g = f.params->grads(), .m = f.params->adam_m(), .v = f.params->adam_v(),
               .n = f.params->n_params(), .step = static_cast<int64_t>(t + 1), .lr = 0.01f});
  }
  auto after = f.step->evaluate(b);
  ASSERT_TRUE(after.ok());
  EXPECT_NEAR(*after / 256, ref["train_loss_after"].get<double>(), 1e-3);
  auto held = f.step->evaluate(batch_of(ref["heldout_ids"]));
  ASSERT_TRUE(held.ok());
  EXPECT_NEAR(*held / 256, ref["heldout_loss_after"].get<double>(), 2e-2);
}

TEST(TrainStep, RefusesABatchThatDoesNotFit) {
  SKIP_UNLESS_EXISTS(kDir + "/reference.json");
  Fixture f = make(std::make_shared<ReferenceBackend>());
  TrainBatch b;
  b.tokens.assign(300, 1);
  b.targets.assign(300, 2);
  b.seqs = {{0, 300}};
  EXPECT_FALSE(f.step->accumulate(b, 1.0f).ok());
  b.tokens.assign(10, 600);  // outside the vocabulary of 512
  b.targets.assign(10, 2);
  b.seqs = {{0, 10}};
  auto st = f.step->accumulate(b, 1.0f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace sluice
