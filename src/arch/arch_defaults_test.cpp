#include "arch/arch_spec.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ArchDefaults, WindowsOfFilesWithoutTheKey) {
  // gemma2: llama.cpp's 4096 whatever the shape.
  ASSERT_NE(find_arch("gemma2")->defaults.window, nullptr);
  EXPECT_EQ(find_arch("gemma2")->defaults.window({.n_layer = 26}), 4096);
  // phi3: the shapes converted before the key existed, and none other.
  const auto phi3 = find_arch("phi3")->defaults.window;
  ASSERT_NE(phi3, nullptr);
  EXPECT_EQ(phi3({.n_layer = 32, .n_head_kv = 32, .n_ctx_train = 4096}), 2047);
  EXPECT_EQ(phi3({.n_layer = 40, .n_head_kv = 10, .n_ctx_train = 4096}), 2047);
  EXPECT_EQ(phi3({.n_layer = 32, .n_head_kv = 32, .n_ctx_train = 131072}), 262144);
  EXPECT_EQ(phi3({.n_layer = 40, .n_head_kv = 10, .n_ctx_train = 131072}), 131072);
  EXPECT_EQ(phi3({.n_layer = 24, .n_head_kv = 8, .n_ctx_train = 4096}), 0);
  // No window assumed for the others: the key is required or unused.
  for (const char* a : {"llama", "qwen2", "gemma3"}) EXPECT_EQ(find_arch(a)->defaults.window, nullptr) << a;
}

TEST(ArchDefaults, QuirksBelongToTheirArchitectures) {
  EXPECT_EQ(find_arch("gemma2")->defaults.q_scale_by_embd_layers, 46);
  EXPECT_EQ(find_arch("gemma3")->defaults.q_scale_by_embd_layers, 62);
  EXPECT_EQ(find_arch("llama")->defaults.q_scale_by_embd_layers, 0);
  for (const ArchSpec* spec : supported_archs()) {
    // Only routed architectures have an HF routing default.
    if (spec->defaults.hf_moe_unnormalized) {
      EXPECT_TRUE(spec->moe.has_value()) << spec->name;
    }
    // Every-layer windows are for architectures without a window pattern of their own,
    // under model_types that map to them.
    for (const char* t : spec->defaults.hf_window_every_layer) {
      EXPECT_FALSE(spec->sliding_window) << spec->name;
      EXPECT_EQ(find_arch_by_hf_model_type(t), spec) << t;
    }
  }
}

}  // namespace
}  // namespace sluice
