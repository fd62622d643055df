// Model loading and architecture variants on the real stories260K weights.
#include "model/model.h"

#include <cstring>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/reference_backend.h"
#include "base/test_data.h"

namespace sluice {
namespace {

using testing::model_path;
using testing::shipped_model_path;
using testing::stories260k_reference_path;

StatusOr<ModelFile> stories() { return open_model_file(shipped_model_path("stories260K.gguf")); }

// stories260K loaded after `change` edits its file (metadata, tensor list). A
// file that does not open fails the calling test (and its status is returned).
StatusOr<std::unique_ptr<Model>> load_changed_stories(const std::function<void(ModelFile&)>& change,
                                                      const ModelOptions& options = {}) {
  auto mf = stories();
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  if (!mf.ok()) return mf.status();
  change(*mf);
  return Model::load(std::make_shared<const ModelFile>(std::move(*mf)), options);
}

// Rows of a [n_out, n_in] f32 matrix reordered from adjacent-pair RoPE layout to
// the NeoX (rotate_half) layout, head by head: new row (h, half, i) = old (h, 2i + half).
std::vector<uint8_t> to_neox_rows(const TensorInfo& t, int64_t n_heads) {
  const int64_t n_in = t.ne[0], n_out = t.ne[1], hd = n_out / n_heads;
  std::vector<uint8_t> out(t.n_bytes);
  const size_t rb = static_cast<size_t>(n_in) * sizeof(float);
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t dst = h * hd + half * (hd / 2) + i, src = h * hd + 2 * i + half;
        std::memcpy(out.data() + dst * rb, t.data + src * rb, rb);
      }
  return out;
}

TEST(Model, Qwen2PathWithNeoxRopeAndBiasesReproducesReference) {
  auto mf_or = stories();
  ASSERT_TRUE(mf_or.ok());
  ModelFile mf = std::move(*mf_or);
  // Relabel llama.* keys as qwen2.*, which selects NeoX RoPE and optional biases.
  Metadata md;
  for (const std::string& k : mf.metadata.keys()) {
    std::string nk = k.rfind("llama.", 0) == 0 ? "qwen2." + k.substr(6) : k;
    md.set(nk, *mf.metadata.find(k));
  }
  md.set("general.architecture", MetaValue::str("qwen2"));
  mf.metadata = md;
  const int64_t n_head = *md.get_int("qwen2.attention.head_count");
  const int64_t n_head_kv = *md.get_int("qwen2.attention.head_count_kv");
  const int64_t n_layer = *md.get_int("qwen2.block_count");
  std::vector<TensorInfo> extra;
  for (TensorInfo& t : mf.tensors) {
    const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
    if (!q && !k) continue;
    t.data = mf.own(to_neox_rows(t, q ? n_head : n_head_kv));
    t.file_offset = -1;
  }
  for (int64_t l = 0; l < n_layer; ++l) {
    for (const char* which : {"q", "k", "v"}) {
      const TensorInfo* w = mf.find("blk." + std::to_string(l) + ".attn_" + which + ".weight");
      TensorInfo b{.name = "blk." + std::to_string(l) + ".attn_" + which + ".bias", .type = DType::kF32,
                   .ne = {w->ne[1]}, .n_bytes = static_cast<uint64_t>(w->ne[1]) * 4};
      b.data = mf.own(std::vector<uint8_t>(b.n_bytes, 0));
      extra.push_back(b);
    }
  }
  for (auto& b : extra) mf.tensors.push_back(b);

  auto m = Model::load(std::make_shared<const ModelFile>(std::move(mf)), ModelOptions{.n_threads = 2});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->hparams().rope_layout, RopeLayout::kNeox);

  std::ifstream in(stories260k_reference_path());
  const auto ref = nlohmann::json::parse(in);
  const auto& g = ref["generation"][1];
  const auto toks = g["tokens"].get<std::vector<int32_t>>();
  const int64_t n_pos = 4, n_vocab = (*m)->hparams().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_pos * n_vocab));
  KvCache kv = (*m)->make_kv_cache(n_pos);
  ASSERT_TRUE((*m)->forward(std::span(toks.data(), n_pos), kv, logits.data(), true).ok());
  double max_err = 0;
  for (int64_t p = 0; p < n_pos; ++p)
    for (int64_t v = 0; v < n_vocab; ++v)
      max_err = std::max(max_err, std::abs(logits[p * n_vocab + v] - g["logits_first_positions"][p][v].get<double>()));
  EXPECT_LT(max_err, 1e-4);
}

TEST(Model, RefusesUnsupportedArchitectureByName) {
  auto m = load_changed_stories(
      [](ModelFile& mf) { mf.metadata.set("general.architecture", MetaValue::str("starcoder2")); });
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("starcoder2"), std::string::npos);
}

// Routed variants this decoder does not run are refused by name, not run wrong.
TEST(Model, RefusesOtherMoeVariantsByName) {
  auto load_arch = [](const char* arch) {
    auto mf = std::make_shared<ModelFile>();
    mf->format = "gguf";
    mf->metadata.set("general.architecture", MetaValue::str(arch));
    return Model::load(std::move(mf));
  };
  auto m = load_arch("deepseek2");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("MLA"), std::string::npos) << m.status().message();
  EXPECT_NE(load_arch("gpt-oss").status().message().find("gpt-oss"), std::string::npos);
  // A llama file with sigmoid expert gating (DeepSeek's rule).
  auto moe = open_model_file(shipped_model_path("stories-moe-f16.gguf"));
  ASSERT_TRUE(moe.ok());
  moe->metadata.set("llama.expert_gating_func", MetaValue::u32(2));
  auto g = Model::load(std::make_shared<const ModelFile>(std::move(*moe)));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("expert_gating_func"), std::string::npos) << g.status().message();
}

TEST(Model, RefusesMissingOrMisshapenTensorsByName) {
  auto m = load_changed_stories([](ModelFile& mf) {
    for (auto& t : mf.tensors)
      if (t.name == "blk.2.ffn_up.weight") t.name = "blk.2.ffn_up.renamed";
  });
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.2.ffn_up.weight"), std::string::npos);

  auto m2 = load_changed_stories(
      [](ModelFile& mf) { mf.metadata.set("llama.feed_forward_length", MetaValue::u32(173)); });
  ASSERT_FALSE(m2.ok());
  EXPECT_NE(m2.status().message().find("expected"), std::string::npos) << m2.status().message();
}

TEST(Model, ActivationHookNamesEveryLayer) {
  auto mf = stories();
  ASSERT_TRUE(mf.ok());
  auto m = Model::load(std::make_shared<const ModelFile>(std::move(*mf)), ModelOptions{.n_threads = 1});
  ASSERT_TRUE(m.ok());
  std::vector<std::string> seen;
  (*m)->set_activation_hook([&](std::string_view name, int64_t layer, const float*, int64_t n_tokens, int64_t) {
    EXPECT_EQ(n_tokens, name == "logits" ? 1 : 2);
    seen.push_back(std::string(name) + "@" + std::to_string(layer));
  });
  KvCache kv = (*m)->make_kv_cache(8);
  std::vector<float> logits(512);
  const int32_t toks[2] = {1, 403};
  ASSERT_TRUE((*m)->forward(toks, kv, logits.data(), false).ok());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "l_out@4"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "embd@-1"), seen.end());
}

// ModelOptions::device_reserve is asked once the model's shape is known and
// before its weights are prepared, and what it returns reaches the backend
// (the engine keeps its KV pool out of --gpu-budget this way); an error from
// it fails the load.
TEST(Model, DeviceReserveIsAskedWithTheModelAndHandedToTheBackendBeforePreparing) {
  struct Recording final : ReferenceBackend {
    std::vector<std::string> calls;
    void set_device_reserve(uint64_t bytes) override { calls.push_back("reserve " + std::to_string(bytes)); }
    PreparedWeights prepare_weights(std::span<const WeightGroup> groups) override {
      calls.push_back("prepare");
      return ReferenceBackend::prepare_weights(groups);
    }
  };
  auto be = std::make_shared<Recording>();
  int64_t layers_seen = 0;
  auto m = load_changed_stories([](ModelFile&) {},
                                 ModelOptions{.backend = be, .device_reserve = [&](const KvShape& kv) -> StatusOr<uint64_t> {
                                                layers_seen = kv.n_layer;
                                                return uint64_t{12345};
                                              }});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(layers_seen, 5);
  EXPECT_EQ(be->calls, (std::vector<std::string>{"reserve 12345", "prepare"}));
  auto bad = load_changed_stories([](ModelFile&) {},
                                   ModelOptions{.backend = std::make_shared<Recording>(),
                                                .device_reserve = [](const KvShape&) -> StatusOr<uint64_t> {
                                                  return resource_exhausted("no room for the KV pool");
                                                }});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("KV pool"), std::string::npos);
}

}  // namespace
}  // namespace sluice
