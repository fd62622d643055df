// PEFT adapter folders: the reference fine-tune's factors written as PEFT
// saves them (HF module names, q/k rows of B in HF's rotate-half order,
// adapter_config.json) read back into the adapter lora-trained.gguf is, and
// give its logits on stories260K (GGUF and HF bases); every unsupported
// option or malformed folder is refused, naming what is wrong.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "lora/lora_adapter.h"
#include "model/model.h"
#include "lora_paths.h"

namespace sluice {
namespace {

using json = nlohmann::json;
using testing::model_path;

const std::string kHfBase = model_path("stories260K/hf");

struct StTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// A safetensors file of F32 tensors, in the given order.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const StTensor& t : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * 4));
}

// GGUF's adjacent-pair rows of B back into HF's rotate-half order.
std::vector<float> permute_to_hf(const std::vector<float>& b, int64_t n_rows, int64_t rank, int64_t n_heads) {
  const int64_t hd = n_rows / n_heads, half = hd / 2;
  std::vector<float> out(b.size());
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t i = 0; i < half; ++i)
        std::copy_n(b.begin() + (h * hd + 2 * i + p) * rank, rank, out.begin() + (h * hd + p * half + i) * rank);
  return out;
}

json default_config() {
  return {{"peft_type", "LORA"},
          {"r", 4},
          {"lora_alpha", 8},
          {"target_modules", {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
          {"bias", "none"},
          {"use_rslora", false},
          {"fan_in_fan_out", false},
          {"modules_to_save", nullptr},
          {"use_dora", false},
          {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()},
          {"task_type", "CAUSAL_LM"}};
}

// The fine-tune as PEFT tensors (stories260K: 8 heads, 4 kv heads).
std::vector<StTensor> peft_tensors(const LoraAdapter& ad) {
  std::vector<StTensor> out;
  for (const LoraMatrix& m : ad.mats) {
    std::string hf = find_arch("llama")->find(m.role)->hf;  // "self_attn.q_proj.weight"
    hf.resize(hf.size() - 7);
    const std::string prefix = "base_model.model.model.layers." + std::to_string(m.layer) + "." + hf;
    std::vector<float> b = m.b;
    if (m.role == TensorRole::kAttnQ) b = permute_to_hf(b, m.n_out, m.rank, 8);
    if (m.role == TensorRole::kAttnK) b = permute_to_hf(b, m.n_out, m.rank, 4);
    out.push_back({prefix + ".lora_A.weight", {m.rank, m.n_in}, m.a});
    out.push_back({prefix + ".lora_B.weight", {m.n_out, m.rank}, b});
  }
  return out;
}

class PeftFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_EXISTS(testing::kLoraTrained);
    auto ad = read_lora(testing::kLoraTrained);
    ASSERT_TRUE(ad.ok());
    gguf_ = std::move(*ad);
    auto mf = open_model_file(testing::kLoraBase);
    ASSERT_TRUE(mf.ok());
    base_ = std::make_shared<const ModelFile>(std::move(*mf));
  }
  // Writes a folder under the test's temp dir.
  std::string folder(const std::string& name, const json& config, const std::vector<StTensor>& tensors) {
    const std::string dir = ::testing::TempDir() + "/peft_" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/adapter_config.json") << config.dump(2);
    write_safetensors(dir + "/adapter_model.safetensors", tensors);
    return dir;
  }
  std::string error_of(const std::string& dir) {
    auto r = read_lora(dir, base_.get());
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  }
  std::vector<float> logits(const std::shared_ptr<const ModelFile>& base, const LoraAdapter& ad) {
    auto m = Model::load(base, ModelOptions{.n_threads = 2});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_TRUE((*m)->add_lora(ad).ok());
    std::ifstream in(testing::kLoraReference);
    ids_ = json::parse(in)["logits_trained"]["ids"].get<std::vector<int32_t>>();
    KvCache kv = (*m)->make_kv_cache(static_cast<int64_t>(ids_.size()), KvDtype::kF32).value();
    std::vector<float> out(ids_.size() * 512);
    EXPECT_TRUE((*m)->forward(ids_, kv, out.data(), true, 1).ok());
    return out;
  }
  LoraAdapter gguf_;
  std::shared_ptr<const ModelFile> base_;
  std::vector<int32_t> ids_;
};

TEST_F(PeftFolder, ReadsIntoTheAdapterTheGgufHoldsAndGivesItsLogits) {
  const std::string dir = folder("trained", default_config(), peft_tensors(gguf_));
  auto ad = read_lora(dir, base_.get());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_EQ(ad->name, "peft_trained");
  EXPECT_EQ(ad->arch, "llama");
  ASSERT_EQ(ad->mats.size(), gguf_.mats.size());
  for (const LoraMatrix& g : gguf_.mats) {
    const LoraMatrix* p = ad->find(g.layer, g.role);
    ASSERT_NE(p, nullptr) << g.base_name;
    EXPECT_EQ(p->base_name, g.base_name);
    EXPECT_EQ(p->a, g.a) << g.base_name;
    EXPECT_EQ(p->b, g.b) << g.base_name;  // q/k rows back in GGUF order
    EXPECT_FLOAT_EQ(ad->scale(*p), 2.0f);
  }
  const auto want = logits(base_, gguf_), got = logits(base_, *ad);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  std::ifstream in(testing::kLoraReference);
  const json ref = json::parse(in)["logits_trained"]["logits"];
  double err = 0;
  for (size_t p = 0; p < ref.size(); ++p)
    for (size_t v = 0; v < 512; ++v) err = std::max(err, std::abs(got[p * 512 + v] - ref[p][v].get<double>()));
  EXPECT_LT(err, 1e-4);
}

TEST_F(PeftFolder, OnTheHfBaseToo) {
  SKIP_UNLESS_EXISTS(kHfBase);
  auto hf = open_model_file(kHfBase);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto hf_base = std::make_shared<const ModelFile>(std::move(*hf));
  const std::string dir = folder("trained_hf", default_config(), peft_tensors(gguf_));
  auto ad = read_lora(dir, hf_base.get());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  const auto got = logits(hf_base, *ad), want = logits(base_, gguf_);
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, static_cast<double>(std::abs(got[i] - want[i])));
  EXPECT_LT(err, 1e-4);
}

TEST_F(PeftFolder, RsLoraScalesByTheSquareRootOfTheRank) {
  json c = default_config();
  c["use_rslora"] = true;
  c["lora_alpha"] = 4;        // 4 / sqrt(4) = 2, the GGUF's 8 / 4
  c["fan_in_fan_out"] = true;  // no effect on the factors of Linear layers
  auto ad = read_lora(folder("rslora", c, peft_tensors(gguf_)), base_.get());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_TRUE(ad->rslora);
  const auto want = logits(base_, gguf_), got = logits(base_, *ad);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  // Written as a GGUF, its alpha becomes what gives the same scale.
  const std::string out = ::testing::TempDir() + "/rslora.gguf";
  ASSERT_TRUE(write_lora_gguf(*ad, out).ok());
  auto back = read_lora(out);
  ASSERT_TRUE(back.ok());
  EXPECT_FLOAT_EQ(back->alpha, 8.0f);
}

TEST_F(PeftFolder, UnsupportedOptionsAndMalformedFoldersAreRefused) {
  const std::vector<StTensor> tensors = peft_tensors(gguf_);
  struct Bad {
    std::string name;
    json config;
    std::vector<StTensor> tensors;
    std::string expect;
  };
  std::vector<Bad> cases;
  auto with = [&](const char* key, json value) {
    json c = default_config();
    c[key] = std::move(value);
    return c;
  };
  cases.push_back({"bias", with("bias", "all"), tensors, "bias \"all\" is not supported"});
  cases.push_back({"save", with("modules_to_save", {"lm_head"}), tensors, "modules_to_save"});
  cases.push_back({"dora", with("use_dora", true), tensors, "DoRA"});
  cases.push_back({"rank0", with("r", 0), tensors, "r = 0"});
  cases.push_back({"ia3", with("peft_type", "IA3"), tensors, "peft_type \"IA3\""});
  cases.push_back({"alpha_pattern", with("alpha_pattern", {{"q_proj", 16}}), tensors, "alpha_pattern"});
  cases.push_back({"gpt2", with("target_modules", {"c_attn"}), tensors, "'c_attn' is not a module of a llama model"});
  cases.push_back({"r8", with("r", 8), tensors, "r = 8"});
  std::vector<StTensor> head = tensors;
  head.push_back({"base_model.model.lm_head.lora_A.weight", {4, 64}, std::vector<float>(256)});
  cases.push_back({"head", default_config(), head, "not a layer module's lora_A or lora_B"});
  std::vector<StTensor> unpaired = tensors;
  unpaired.pop_back();  // layer 4's down_proj lora_B
  cases.push_back({"unpaired", default_config(), unpaired, "has lora_A but no lora_B"});
  std::vector<StTensor> fused = tensors;
  fused[0].name = "base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight";
  fused[1].name = "base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight";
  cases.push_back({"phi3", with("target_modules", nullptr), fused, "not a matrix of a llama model"});
  std::vector<StTensor> experts = tensors;
  experts[0].name = "base_model.model.model.layers.0.block_sparse_moe.experts.0.w1.lora_A.weight";
  cases.push_back({"experts", with("target_modules", nullptr), experts, "routed expert"});
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.name);
    const std::string e = error_of(folder(b.name, b.config, b.tensors));
    EXPECT_NE(e.find(b.expect), std::string::npos) << e;
  }
  // A folder without its files, and one with a pickle only.
  const std::string empty = ::testing::TempDir() + "/peft_empty";
  std::filesystem::create_directories(empty);
  EXPECT_NE(error_of(empty).find("no adapter_config.json"), std::string::npos);
  const std::string pickle = folder("pickle", default_config(), tensors);
  std::filesystem::rename(pickle + "/adapter_model.safetensors", pickle + "/adapter_model.bin");
  EXPECT_NE(error_of(pickle).find("pickle"), std::string::npos);
  // A folder names HF modules: it cannot be read without its base.
  auto no_base = read_lora(folder("no_base", default_config(), tensors));
  ASSERT_FALSE(no_base.ok());
  EXPECT_NE(no_base.status().message().find("needs the base model"), std::string::npos);
}

}  // namespace
}  // namespace sluice
