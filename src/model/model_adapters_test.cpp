// ModelAdapters: an adapter applied at inference equals its delta merged into
// the base's weights (llama, phi3's fused matrices, the attention of a routed
// model), and every bad adapter is refused with an error naming what is wrong.
#include "model/model_adapters.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "backend/reference_backend.h"
#include "base/test_data.h"
#include "format/gguf_writer.h"
#include "lora/lora_synth.h"
#include "model/model.h"
#include "model/synth.h"

namespace sluice {
namespace {

using testing::model_path;

const std::string kBase = testing::shipped_model_path("stories260K.gguf");
const std::string kTrained = model_path("stories260K-lora/lora-trained.gguf");

std::shared_ptr<const ModelFile> open_file(const std::string& path) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return std::make_shared<const ModelFile>(std::move(*mf));
}

// A tiny synthetic f32 model of a preset, written once per process (ctest
// runs this binary's tests as processes in parallel, which must not write one
// file together) and removed when the process ends.
std::string synth_path(const std::string& preset) {
  struct Written {
    std::vector<std::string> paths;
    ~Written() {
      for (const std::string& p : paths) std::remove(p.c_str());
    }
  };
  static Written written;
  const std::string path = ::testing::TempDir() + "/adapters_" + preset + "_" + std::to_string(::getpid()) + ".gguf";
  if (!std::filesystem::exists(path)) {
    written.paths.push_back(path);
    SynthShape shape = synth_preset(preset).value();
    shape.n_vocab = 256;
    shape.n_layer = std::min<int64_t>(shape.n_layer, 3);
    EXPECT_TRUE(write_synth_model({.shape = shape, .type = "f32", .seed = 5, .n_threads = 2}, path).ok());
  }
  return path;
}

// The base at `path` with every adapted matrix W replaced by W + scale B A
// (f32 weights; sums in double).
std::shared_ptr<const ModelFile> merged(const std::string& path, const LoraAdapter& ad, float user_scale) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok());
  for (const LoraMatrix& m : ad.mats) {
    TensorInfo* t = nullptr;
    for (TensorInfo& x : mf->tensors)
      if (x.name == m.base_name) t = &x;
    EXPECT_TRUE(t && t->type == DType::kF32) << m.base_name;
    std::vector<uint8_t> bytes(t->data, t->data + t->n_bytes);
    auto* w = reinterpret_cast<float*>(bytes.data());
    const double scale = static_cast<double>(user_scale) * ad.scale(m);
    for (int64_t o = 0; o < m.n_out; ++o)
      for (int64_t i = 0; i < m.n_in; ++i) {
        double s = 0;
        for (int64_t r = 0; r < m.rank; ++r) s += static_cast<double>(m.b[o * m.rank + r]) * m.a[r * m.n_in + i];
        w[o * m.n_in + i] = static_cast<float>(w[o * m.n_in + i] + scale * s);
      }
    t->data = mf->own(std::move(bytes));
    t->file_offset = -1;
  }
  return std::make_shared<const ModelFile>(std::move(*mf));
}

std::vector<float> all_logits(Model& m, LoraMask loras) {
  std::vector<int32_t> ids(20);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 29 + 3) % 200);
  KvCache kv = m.make_kv_cache(32, KvDtype::kF32).value();
  std::vector<float> out(ids.size() * static_cast<size_t>(m.hparams().n_vocab));
  EXPECT_TRUE(m.forward(ids, kv, out.data(), true, loras).ok());
  return out;
}

struct MergeCase {
  std::string base;  // a shared model path or a synth preset ("synth:tiny-phi3")
  std::vector<TensorRole> roles;  // synth_lora's (empty: the stories260K fine-tune)
};

class AdapterEqualsMerged : public ::testing::TestWithParam<MergeCase> {};

TEST_P(AdapterEqualsMerged, LogitsAgree) {
  const MergeCase& c = GetParam();
  std::string path = c.base;
  if (path.rfind("synth:", 0) == 0) path = synth_path(path.substr(6));
  if (c.roles.empty()) SKIP_UNLESS_EXISTS(kTrained);  // the reference fine-tune, in ../shared
  auto base = open_file(path);
  StatusOr<LoraAdapter> ad = c.roles.empty() ? read_lora(kTrained)
                                             : synth_lora(*base, {.rank = 8, .b_std = 0.05f, .roles = c.roles});
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  const float scale = 0.8f;
  for (const char* backend : {"cpu", "reference"}) {
    SCOPED_TRACE(backend);
    auto be = create_backend({.name = backend, .n_threads = 2});
    ASSERT_TRUE(be.ok());
    auto m = Model::load(base, ModelOptions{.n_threads = 2, .backend = *be});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE((*m)->add_lora(*ad, scale).ok());
    auto mm = Model::load(merged(path, *ad, scale), ModelOptions{.n_threads = 2, .backend = *be});
    ASSERT_TRUE(mm.ok()) << mm.status().to_string();
    const auto got = all_logits(**m, 1), want = all_logits(**mm, 0), plain = all_logits(**m, 0);
    double err = 0, moved = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(got[i] - want[i])));
      moved = std::max(moved, static_cast<double>(std::abs(plain[i] - want[i])));
    }
    EXPECT_LT(err, 2e-4);
    EXPECT_GT(moved, 100 * err);  // the delta is there, well above the rounding
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bases, AdapterEqualsMerged,
    ::testing::Values(MergeCase{kBase, {}},
                      MergeCase{"synth:tiny-phi3", {TensorRole::kAttnQkv, TensorRole::kAttnOutput,
                                                    TensorRole::kFfnGateUp, TensorRole::kFfnDown}},
                      MergeCase{"synth:tiny-qwen2moe", {TensorRole::kAttnQ, TensorRole::kAttnK, TensorRole::kAttnV,
                                                        TensorRole::kAttnOutput}},
                      MergeCase{"synth:tiny-gemma2", {TensorRole::kAttnQ, TensorRole::kAttnOutput,
                                                      TensorRole::kFfnGate, TensorRole::kFfnDown}}),
    [](const auto& info) {
      std::string n = info.param.base.rfind("synth:", 0) == 0 ? info.param.base.substr(6) : "stories260K";
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// --- bad input ------------------------------------------------------------

std::string add_error(const std::shared_ptr<const ModelFile>& base, const LoraAdapter& ad,
                      std::shared_ptr<Backend> be = nullptr) {
  auto m = Model::load(base, ModelOptions{.n_threads = 2, .backend = std::move(be)});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  auto r = (*m)->add_lora(ad);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ((*m)->adapters().size(), 0);
  return r.ok() ? "" : r.status().message();
}

TEST(AdapterRefusals, AnAdapterForAnotherBase) {
  auto base = open_file(kBase);
  // Another architecture.
  auto qwen = synth_lora(*open_file(synth_path("tiny-qwen3")), {});
  ASSERT_TRUE(qwen.ok());
  EXPECT_NE(add_error(base, *qwen).find("is for a qwen3 model, the base is llama"), std::string::npos);
  // The same architecture at other shapes.
  auto tiny = synth_lora(*open_file(synth_path("tiny")), {});
  ASSERT_TRUE(tiny.ok());
  const std::string e = add_error(base, *tiny);
  EXPECT_NE(e.find("blk.0.attn_q.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("another base"), std::string::npos) << e;
}

TEST(AdapterRefusals, ATargetTheBaseLacks) {
  SKIP_UNLESS_EXISTS(kTrained);
  auto ad = read_lora(kTrained);
  ASSERT_TRUE(ad.ok());
  ad->mats[3].base_name = "blk.9.attn_q.weight";
  ad->mats[3].layer = 9;
  const std::string e = add_error(open_file(kBase), *ad);
  EXPECT_NE(e.find("'blk.9.attn_q.weight', which the base does not have"), std::string::npos) << e;
}

TEST(AdapterRefusals, RoutersAndSharedExpertsTakeNoAdapter) {
  auto base = open_file(synth_path("tiny-qwen2moe"));
  for (TensorRole role : {TensorRole::kFfnRouter, TensorRole::kFfnGateShexp}) {
    auto ad = synth_lora(*base, {.roles = {role}});
    ASSERT_TRUE(ad.ok()) << ad.status().to_string();
    const std::string e = add_error(base, *ad);
    EXPECT_NE(e.find("takes no adapter"), std::string::npos) << e;
  }
}

TEST(AdapterRefusals, RoutedExpertsAreRefusedWhenRead) {
  LoraAdapter ad{.name = "experts", .arch = "llama", .alpha = 8.0f};
  ad.mats.push_back(LoraMatrix{.base_name = "blk.0.ffn_gate_exps.weight", .layer = 0,
                               .role = TensorRole::kFfnGateExps, .n_in = 64, .n_out = 32, .rank = 2,
                               .a = std::vector<float>(128, 0.1f), .b = std::vector<float>(64, 0.1f)});
  const std::string path = ::testing::TempDir() + "/experts_lora.gguf";
  ASSERT_TRUE(write_lora_gguf(ad, path).ok());
  auto r = read_lora(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stack of experts"), std::string::npos) << r.status().to_string();
}

TEST(AdapterRefusals, ARankOfZero) {
  SKIP_UNLESS_EXISTS(kTrained);
  // In memory (an adapter built by code), refused when added.
  auto ad = read_lora(kTrained);
  ASSERT_TRUE(ad.ok());
  ad->mats[2].rank = 0;
  ad->mats[2].a.clear();
  ad->mats[2].b.clear();
  const std::string e = add_error(open_file(kBase), *ad);
  EXPECT_NE(e.find("with rank 0"), std::string::npos) << e;
  // In a file: a GGUF tensor with a zero dimension is refused by the reader.
  GgufWriter w;
  w.metadata().set("general.architecture", MetaValue::str("llama"));
  w.metadata().set("general.type", MetaValue::str("adapter"));
  w.metadata().set("adapter.type", MetaValue::str("lora"));
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", DType::kF32, {64, 0}, nullptr).ok());
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_b", DType::kF32, {0, 64}, nullptr).ok());
  const std::string path = ::testing::TempDir() + "/rank0_lora.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto r = read_lora(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'blk.0.attn_q.weight.lora_a' dimension 1 is 0"), std::string::npos)
      << r.status().to_string();
}

TEST(AdapterRefusals, AFileThatIsNotAnAdapter) {
  auto r = read_lora(kBase);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not a LoRA adapter"), std::string::npos) << r.status().to_string();
  auto missing = read_lora(::testing::TempDir() + "/no_such_adapter.gguf");
  EXPECT_FALSE(missing.ok());
}

// The reference backend with its LoRA operator switched off: what a backend
// without one looks like to the model.
class NoLoraBackend final : public ReferenceBackend {
 public:
  bool supports(Op op, const OpTypes& types) const override {
    return op != Op::kLora && ReferenceBackend::supports(op, types);
  }
};

TEST(AdapterRefusals, ABackendWithoutTheOperator) {
  SKIP_UNLESS_EXISTS(kTrained);
  auto ad = read_lora(kTrained);
  ASSERT_TRUE(ad.ok());
  const std::string e = add_error(open_file(kBase), *ad, std::make_shared<NoLoraBackend>());
  EXPECT_NE(e.find("has no LoRA operator"), std::string::npos) << e;
}

}  // namespace
}  // namespace sluice
