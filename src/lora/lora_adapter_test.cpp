#include "lora/lora_adapter.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "base/test_data.h"
#include "format/gguf_reader.h"
#include "format/gguf_writer.h"

namespace sluice {
namespace {

using testing::model_path;

const std::string kInit = model_path("stories260K-lora/lora-init.gguf");
const std::string kBase = testing::shipped_model_path("stories260K.gguf");

TEST(LoraAdapter, ReadsTheReferenceAdapterWithRolesAndShapes) {
  SKIP_UNLESS_EXISTS(kInit);
  auto ad = read_lora(kInit);
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  EXPECT_EQ(ad->arch, "llama");
  EXPECT_FLOAT_EQ(ad->alpha, 8.0f);
  ASSERT_EQ(ad->mats.size(), 35u);  // 7 targets x 5 layers
  const LoraMatrix* down = ad->find(3, TensorRole::kFfnDown);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->base_name, "blk.3.ffn_down.weight");
  EXPECT_EQ(down->n_in, 172);
  EXPECT_EQ(down->n_out, 64);
  EXPECT_EQ(down->rank, 4);
  EXPECT_EQ(down->a.size(), 4u * 172u);
  EXPECT_EQ(down->b.size(), 64u * 4u);
  EXPECT_FLOAT_EQ(ad->scale(*down), 2.0f);
  const LoraMatrix* k = ad->find(0, TensorRole::kAttnK);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->n_out, 32);
  EXPECT_EQ(ad->find(0, TensorRole::kAttnNorm), nullptr);
  EXPECT_EQ(ad->n_params(), 5 * (4 * (64 + 64) * 2 + 2 * 4 * (64 + 32) + 2 * 4 * (64 + 172) + 4 * (172 + 64)));
}

TEST(LoraAdapter, ChecksAgainstTheBase) {
  SKIP_UNLESS_EXISTS(kInit);
  auto ad = read_lora(kInit);
  ASSERT_TRUE(ad.ok());
  auto base = read_gguf(kBase);
  ASSERT_TRUE(base.ok());
  EXPECT_TRUE(check_lora(*ad, *base).ok());

  LoraAdapter other_arch = *ad;
  other_arch.arch = "qwen2";
  Status st = check_lora(other_arch, *base);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("qwen2"), std::string::npos) << st.to_string();

  LoraAdapter wrong_shape = *ad;
  wrong_shape.mats[0].n_in = 32;
  st = check_lora(wrong_shape, *base);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("blk.0.attn_q.weight"), std::string::npos) << st.to_string();

  LoraAdapter missing = *ad;
  missing.mats[0].base_name = "blk.9.attn_q.weight";
  EXPECT_FALSE(check_lora(missing, *base).ok());
}

TEST(LoraAdapter, WritesWhatItReads) {
  SKIP_UNLESS_EXISTS(kInit);
  auto ad = read_lora(kInit);
  ASSERT_TRUE(ad.ok());
  const std::string out = ::testing::TempDir() + "lora_roundtrip.gguf";
  ASSERT_TRUE(write_lora_gguf(*ad, out).ok());
  auto back = read_lora(out);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->mats.size(), ad->mats.size());
  EXPECT_EQ(back->alpha, ad->alpha);
  EXPECT_EQ(back->arch, ad->arch);
  for (size_t i = 0; i < ad->mats.size(); ++i) {
    EXPECT_EQ(back->mats[i].base_name, ad->mats[i].base_name);
    EXPECT_EQ(back->mats[i].a, ad->mats[i].a);
    EXPECT_EQ(back->mats[i].b, ad->mats[i].b);
  }
  // Same tensors, names, shapes and bytes as the file llama.cpp's tools wrote.
  auto f1 = read_gguf(kInit);
  auto f2 = read_gguf(out);
  ASSERT_TRUE(f1.ok() && f2.ok());
  ASSERT_EQ(f1->tensors.size(), f2->tensors.size());
  for (size_t i = 0; i < f1->tensors.size(); ++i) {
    EXPECT_EQ(f1->tensors[i].name, f2->tensors[i].name);
    EXPECT_EQ(f1->tensors[i].ne, f2->tensors[i].ne);
    EXPECT_EQ(0, memcmp(f1->tensors[i].data, f2->tensors[i].data, f1->tensors[i].n_bytes));
  }
  std::remove(out.c_str());
}

TEST(LoraAdapter, RefusesWhatIsNotAnAdapter) {
  auto st = read_lora(kBase);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("not a LoRA adapter"), std::string::npos) << st.status().to_string();
}

TEST(LoraAdapter, RefusesUnpairedFactors) {
  const std::string out = ::testing::TempDir() + "lora_unpaired.gguf";
  GgufWriter w;
  w.metadata().set("general.architecture", MetaValue::str("llama"));
  w.metadata().set("general.type", MetaValue::str("adapter"));
  w.metadata().set("adapter.type", MetaValue::str("lora"));
  std::vector<float> a(64 * 4, 0.5f);
  ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", DType::kF32, {64, 4},
                           reinterpret_cast<const uint8_t*>(a.data())).ok());
  ASSERT_TRUE(w.write(out).ok());
  auto st = read_lora(out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("no matching"), std::string::npos) << st.status().to_string();

  GgufWriter w2;
  w2.metadata() = w.metadata();
  ASSERT_TRUE(w2.add_tensor("blk.0.attn_q.weight.lora_a", DType::kF32, {64, 4},
                            reinterpret_cast<const uint8_t*>(a.data())).ok());
  ASSERT_TRUE(w2.add_tensor("blk.0.attn_q.weight.lora_b", DType::kF32, {3, 64},
                            reinterpret_cast<const uint8_t*>(a.data())).ok());
  ASSERT_TRUE(w2.write(out).ok());
  st = read_lora(out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("rank"), std::string::npos) << st.status().to_string();
  std::remove(out.c_str());
}

}  // namespace
}  // namespace sluice
