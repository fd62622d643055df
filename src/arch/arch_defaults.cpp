#include "arch/arch_defaults.h"

#include <string_view>

namespace sluice {
namespace {

// llama.cpp's assumption for gemma2 files without the key.
constexpr int64_t gemma2_window(const ArchShape&) { return 4096; }

// Phi-3 files converted before the key existed (mini/medium 4k and 128k).
constexpr int64_t phi3_window(const ArchShape& s) {
  if ((s.n_layer == 32 || s.n_layer == 40) && s.n_ctx_train == 4096) return 2047;
  if (s.n_layer == 32 && s.n_head_kv == 32 && s.n_ctx_train == 131072) return 262144;
  if (s.n_layer == 40 && s.n_ctx_train == 131072) return 131072;
  return 0;
}

constexpr const char* kLlamaWindowHf[] = {"llama", "mistral"};

struct Row {
  const char* arch;  // ArchSpec::name
  ArchDefaults defaults;
};
constexpr Row kRows[] = {
    {"llama", {.hf_window_every_layer = kLlamaWindowHf}},
    {"qwen2moe", {.hf_moe_unnormalized = true}},
    {"qwen3moe", {.hf_moe_unnormalized = true}},
    {"gemma2", {.window = gemma2_window, .q_scale_by_embd_layers = 46}},
    {"gemma3", {.q_scale_by_embd_layers = 62}},
    {"phi3", {.window = phi3_window}},
};
constexpr ArchDefaults kNone{};

}  // namespace

const ArchDefaults& arch_defaults(const ArchSpec& spec) {
  for (const Row& r : kRows)
    if (std::string_view(spec.name) == r.arch) return r.defaults;
  return kNone;
}

}  // namespace sluice
