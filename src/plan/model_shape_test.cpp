// Shapes from presets, GGUF metadata and HF config.json; parameter and byte
// counts against the engine's own accounting of a real (synthetic) file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "format/model_file.h"
#include "model/model.h"
#include "model/synth.h"
#include "plan/kv_plan.h"
#include "plan/roofline.h"
#include "plan/weight_bytes.h"

namespace sluice::plan {
namespace {

std::string billions(int64_t n) { return fmt::format("{:.2f}", static_cast<double>(n) / 1e9); }

TEST(ModelShape, PresetParameterCounts) {
  // Published sizes: Llama 2 7B 6.74B, 13B 13.02B, 70B 68.98B; Llama 3 8B 8.03B,
  // 70B 70.55B; Llama 3.1 405B 405.85B.
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-7b").value()).total()), "6.74");
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-13b").value()).total()), "13.02");
  EXPECT_EQ(billions(count_params(preset_shape("llama-2-70b").value()).total()), "68.98");
  EXPECT_EQ(billions(count_params(preset_shape("llama-3-8b").value()).total()), "8.03");
  EXPECT_EQ(billions(count_params(preset_shape("llama-3-70b").value()).total()), "70.55");
  EXPECT_EQ(billions(count_params(preset_shape("405b").value()).total()), "405.85");
}

TEST(ModelShape, MoePresetActiveVersusTotal) {
  const ParamCount p = count_params(preset_shape("glm-4.7").value());
  // ~355B total and ~32B active on the model card (which also counts a
  // multi-token-prediction block this shape leaves out).
  EXPECT_GT(p.total(), 340'000'000'000);
  EXPECT_LT(p.total(), 360'000'000'000);
  EXPECT_GT(p.active(), 30'000'000'000);
  EXPECT_LT(p.active(), 36'000'000'000);
  EXPECT_EQ(p.experts_active * 20, p.experts);  // 8 of 160
}

TEST(ModelShape, UnknownPresetIsNotFound) {
  const auto s = preset_shape("llama-9");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("llama-3-70b"), std::string::npos);
}

TEST(ModelShape, ValidateRefusesBadShapes) {
  ModelShape s = preset_shape("llama-3-8b").value();
  s.n_head_kv = 5;
  EXPECT_FALSE(validate_shape(s).ok());
  s = preset_shape("glm-4.7").value();
  s.n_expert_used = 0;
  EXPECT_FALSE(validate_shape(s).ok());
}

TEST(ModelShape, FromHfConfig) {
  const std::string llama = R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 128256, "max_position_embeddings": 8192})";
  const ModelShape s = shape_from_hf_config(llama, "config.json").value();
  EXPECT_EQ(count_params(s).total(), count_params(preset_shape("llama-3-8b").value()).total());
  const std::string mixtral = R"({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
    "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})";
  const ParamCount m = count_params(shape_from_hf_config(mixtral, "config.json").value());
  EXPECT_EQ(billions(m.total()), "46.70");   // Mixtral 8x7B: 46.7B total
  EXPECT_EQ(billions(m.active()), "12.88");  // 12.9B active
  EXPECT_FALSE(shape_from_hf_config("{\"hidden_size\": 1}", "config.json").ok());
  EXPECT_FALSE(shape_from_hf_config("not json", "config.json").ok());
}

// A model_type sluice does not run still plans: GLM-4.7's config (DeepSeek-style
// MoE keys) gives the preset's shape, read by the loader's config reader.
TEST(ModelShape, FromHfConfigOfAnArchitectureNotRun) {
  const std::string glm = R"({"model_type": "glm4_moe", "hidden_size": 5120, "num_hidden_layers": 92,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
    "vocab_size": 151552, "max_position_embeddings": 131072, "n_routed_experts": 160,
    "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "n_shared_experts": 1,
    "first_k_dense_replace": 3, "rope_scaling": {"type": "yarn", "factor": 4.0}})";
  const ModelShape s = shape_from_hf_config(glm, "config.json").value();
  const ModelShape p = preset_shape("glm-4.7").value();
  EXPECT_EQ(s.name, "glm4_moe");
  EXPECT_EQ(s.n_layer_dense, 3);
  EXPECT_EQ(s.n_ff_shared, 1536);
  EXPECT_EQ(count_params(s).total(), count_params(p).total());
  EXPECT_EQ(count_params(s).active(), count_params(p).active());
  // Its counts still have to make sense.
  EXPECT_FALSE(shape_from_hf_config(R"({"model_type": "glm4_moe", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 10, "n_routed_experts": 4, "num_experts_per_tok": 8,
    "intermediate_size": 128})", "config.json").ok());
}

TEST(WeightFormat, BlockOverheadCounts) {
  EXPECT_DOUBLE_EQ(parse_weight_format("q8_0")->bits_per_weight(), 8.5);
  EXPECT_DOUBLE_EQ(parse_weight_format("Q4_K")->bits_per_weight(), 4.5);
  EXPECT_DOUBLE_EQ(parse_weight_format("q6_k")->bits_per_weight(), 6.5625);
  EXPECT_DOUBLE_EQ(parse_weight_format("bits:4.8")->bits_per_weight(), 4.8);
  EXPECT_EQ(parse_weight_format("q8_0")->bytes(33), 68u);  // two blocks
  EXPECT_FALSE(parse_weight_format("q3_xs").ok());
  EXPECT_FALSE(parse_weight_format("bits:0").ok());
  EXPECT_FALSE(parse_weight_format("bits:4.8x").ok());
}

TEST(WeightBytes, MoeExpertsTouchedGrowWithBatch) {
  const WeightBytes w = weight_bytes(preset_shape("glm-4.7").value(), uniform_mix(parse_weight_format("q4_k").value()));
  EXPECT_DOUBLE_EQ(w.experts_touched(1), 8.0);
  EXPECT_GT(w.experts_touched(16), 8.0 * 10);
  EXPECT_LT(w.experts_touched(16), 160.0);
  EXPECT_LT(w.matrix_read_bytes(1), w.matrix_read_bytes(16));
}

// A tiny synthetic GGUF in a temporary file, removed at the end.
class SynthFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fmt::format("/tmp/sluice-plan-test-{}-{}.gguf", ::getpid(), ::testing::UnitTest::GetInstance()->random_seed());
    SynthOptions o{.shape = synth_preset("tiny").value(), .type = "q8_0", .seed = 3, .n_threads = 1};
    ASSERT_TRUE(write_synth_model(o, path_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(SynthFile, GgufShapeAndBytesMatchTheEngine) {
  auto mf = open_model_file(path_);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  const ModelShape s = shape_from_metadata(file->metadata).value();
  EXPECT_EQ(s.n_embd, 256);
  EXPECT_EQ(s.n_layer, 4);
  EXPECT_EQ(s.n_head_kv, 4);
  // The planner's bytes of a uniform Q8_0 model equal the file's tensor bytes...
  const WeightBytes planned = weight_bytes(s, uniform_mix(parse_weight_format("q8_0").value()));
  const WeightBytes exact = weight_bytes_of_file(*file, s);
  EXPECT_EQ(planned.total(), file->total_tensor_bytes());
  EXPECT_EQ(exact.total(), file->total_tensor_bytes());
  for (int c = 0; c < kNumTensorClasses; ++c) EXPECT_EQ(planned.stored[c], exact.stored[c]) << c;
  // ...and the bytes one decode token reads equal the engine's own count.
  auto model = Model::load(file, {.n_threads = 1, .n_batch = 8});
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(exact.matrix_read_bytes(1), static_cast<double>((*model)->weight_bytes()));
}

// Gemma ties its output to the token embeddings (no output.weight) and has
// post-norms (gemma3 also q/k norms); phi3 fuses q/k/v and gate/up. For each
// tiny preset written in f32, the planner's bytes of the shape equal the
// file's tensor bytes, class by class.
TEST(ModelShape, PlannedBytesEqualTheSynthFileForEveryArchitecture) {
  for (const std::string preset : {"tiny", "tiny-mistral", "tiny-gemma2", "tiny-gemma3", "tiny-phi3", "tiny-qwen3"}) {
    SCOPED_TRACE(preset);
    const std::string path = fmt::format("/tmp/sluice-plan-bytes-{}-{}.gguf", ::getpid(), preset);
    ASSERT_TRUE(write_synth_model({.shape = synth_preset(preset).value(), .type = "f32", .seed = 4, .n_threads = 1}, path).ok());
    auto mf = open_model_file(path);
    std::remove(path.c_str());
    ASSERT_TRUE(mf.ok()) << mf.status().to_string();
    auto s = shape_from_model_file(*mf);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const bool gemma = preset.starts_with("tiny-gemma");
    EXPECT_EQ(s->tied_embeddings, gemma);
    EXPECT_EQ(shape_from_metadata(mf->metadata)->tied_embeddings, gemma) << "from the architecture's table alone";
    const WeightBytes planned = weight_bytes(*s, uniform_mix(parse_weight_format("f32").value()));
    const WeightBytes exact = weight_bytes_of_file(*mf, *s);
    EXPECT_EQ(planned.total(), mf->total_tensor_bytes());
    EXPECT_EQ(static_cast<uint64_t>(count_params(*s).total()) * 4, mf->total_tensor_bytes());
    for (int c = 0; c < kNumTensorClasses; ++c) EXPECT_EQ(planned.stored[c], exact.stored[c]) << c;
  }
}

// Every field the planner has, for comparing two shapes (the name aside).
void expect_same_shape(const ModelShape& a, const ModelShape& b) {
  EXPECT_EQ(a.n_vocab, b.n_vocab);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_head_kv, b.n_head_kv);
  EXPECT_EQ(a.head_dim_or_default(), b.head_dim_or_default());
  EXPECT_EQ(a.n_ff, b.n_ff);
  EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.n_norm_layer, b.n_norm_layer);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.n_swa, b.n_swa);
  EXPECT_EQ(a.n_layer_swa, b.n_layer_swa);
  EXPECT_EQ(a.n_expert, b.n_expert);
  EXPECT_EQ(a.n_expert_used, b.n_expert_used);
  EXPECT_EQ(a.n_ff_expert, b.n_ff_expert);
  EXPECT_EQ(a.n_ff_shared, b.n_ff_shared);
  EXPECT_EQ(a.n_layer_dense, b.n_layer_dense);
}

// The models both synth and the planner name are defined once (synth's
// presets): the planner's preset has synth's dimensions, and what the
// architecture adds is what the real model has (parameter counts above).
TEST(ModelShape, PresetsSynthAlsoWritesHaveSynthsShape) {
  struct Pair {
    const char* synth;
    const char* plan;
    int64_t n_layer;  // synth's layer override (0: the preset's)
  };
  for (const Pair& p : {Pair{"8b", "llama-3-8b", 0}, Pair{"70b-slice", "llama-3-70b", 80},
                        Pair{"mistral-7b", "mistral-7b", 0}, Pair{"gemma2-9b", "gemma2-9b", 0},
                        Pair{"gemma3-4b", "gemma3-4b", 0}}) {
    SCOPED_TRACE(p.plan);
    const SynthShape s = synth_preset(p.synth, p.n_layer).value();
    const ModelShape m = preset_shape(p.plan).value();
    EXPECT_EQ(m.name, p.plan);
    EXPECT_EQ(m.n_vocab, s.n_vocab);
    EXPECT_EQ(m.n_embd, s.n_embd);
    EXPECT_EQ(m.n_layer, s.n_layer);
    EXPECT_EQ(m.n_head, s.n_head);
    EXPECT_EQ(m.n_head_kv, s.n_head_kv);
    EXPECT_EQ(m.head_dim_or_default(), s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head);
    EXPECT_EQ(m.n_ff, s.n_ff);
    EXPECT_EQ(m.n_ctx_train, s.n_ctx);
    EXPECT_EQ(m.n_swa, s.n_swa);
    EXPECT_EQ(m.n_expert, s.n_expert);
  }
  EXPECT_EQ(preset_shape("gemma2-9b")->n_layer_swa, 21);  // the even blocks
  EXPECT_EQ(preset_shape("gemma3-4b")->n_layer_swa, 29);  // 5 of every 6
  EXPECT_EQ(preset_shape("mistral-7b")->n_layer_swa, 32);
  EXPECT_TRUE(preset_shape("gemma3-4b")->qk_norm);
  EXPECT_FALSE(preset_shape("llama-3-8b")->tied_embeddings);
}

// shape_from_synth() reads a shape as the planner reads the file synth
// writes of it: field by field the same as that file, for each architecture.
TEST(ModelShape, ShapeFromSynthEqualsTheWrittenFile) {
  for (const std::string preset : {"tiny", "tiny-mistral", "tiny-gemma2", "tiny-gemma3", "tiny-phi3", "tiny-qwen3moe"}) {
    SCOPED_TRACE(preset);
    SynthShape shape = synth_preset(preset).value();
    shape.n_vocab = 512;
    const std::string path = fmt::format("/tmp/sluice-plan-synth-{}-{}.gguf", ::getpid(), preset);
    ASSERT_TRUE(write_synth_model({.shape = shape, .type = "f32", .seed = 4, .n_threads = 1}, path).ok());
    auto mf = open_model_file(path);
    std::remove(path.c_str());
    ASSERT_TRUE(mf.ok()) << mf.status().to_string();
    const ModelShape from_file = shape_from_model_file(*mf).value();
    const ModelShape from_synth = shape_from_synth(shape).value();
    EXPECT_EQ(from_synth.name, preset);
    expect_same_shape(from_synth, from_file);
  }
  SynthShape bad = synth_preset("tiny").value();
  bad.arch = "no-such-arch";
  EXPECT_FALSE(shape_from_synth(bad).ok());
}

TEST(ModelShape, GemmaPresetsAndConfigsAreTied) {
  // Gemma 2 9B: 9.24B parameters (with an untied head it would be 10.16B).
  const ModelShape g2 = preset_shape("gemma2-9b").value();
  EXPECT_EQ(billions(count_params(g2).total()), "9.24");
  EXPECT_EQ(billions(count_params(preset_shape("mistral-7b").value()).total()), "7.24");
  // An HF config without the key: Gemma's config classes default to tied.
  const std::string gemma2 = R"({"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336,
    "vocab_size": 256000, "sliding_window": 4096})";
  const ModelShape h = shape_from_hf_config(gemma2, "config.json").value();
  EXPECT_TRUE(h.tied_embeddings);
  EXPECT_EQ(count_params(h).total(), count_params(g2).total());
  EXPECT_EQ(h.n_layer_swa, 21);
  EXPECT_EQ(h.kv_window(), 0);
  const std::string phi3 = R"({"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
    "num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "sliding_window": 2047})";
  const ModelShape p = shape_from_hf_config(phi3, "config.json").value();
  EXPECT_FALSE(p.tied_embeddings);
  EXPECT_EQ(p.kv_window(), 2047);
}

// The window as the engine sees it: every layer windowed (tiny-mistral) or
// some (tiny-gemma2: even layers; tiny-gemma3: 5 of 6), from GGUF metadata and
// HF configs.
TEST(ModelShape, WindowOfEveryLayerMatchesTheEngine) {
  for (const std::string preset : {"tiny-mistral", "tiny-gemma2", "tiny-gemma3", "tiny-phi3", "tiny"}) {
    SCOPED_TRACE(preset);
    const std::string path = fmt::format("/tmp/sluice-plan-window-{}-{}.gguf", ::getpid(), preset);
    ASSERT_TRUE(write_synth_model({.shape = synth_preset(preset).value(), .type = "f16", .seed = 4, .n_threads = 1}, path).ok());
    auto mf = open_model_file(path);
    std::remove(path.c_str());
    ASSERT_TRUE(mf.ok());
    const ModelShape s = shape_from_metadata(mf->metadata).value();
    const ModelHparams hp = hparams_from_metadata(mf->metadata).value();
    EXPECT_EQ(s.kv_window(), hp.kv_window());
    EXPECT_EQ(s.n_swa, hp.n_swa);
    int64_t n_swa_layers = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l) n_swa_layers += hp.layer_is_swa(l) ? 1 : 0;
    EXPECT_EQ(s.n_layer_swa, n_swa_layers);
  }
  const std::string qwen2 = R"({"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
    "sliding_window": 32768, "use_sliding_window": false})";
  EXPECT_EQ(shape_from_hf_config(qwen2, "config.json")->n_layer_swa, 0);
  const std::string mistral = R"({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
    "sliding_window": 4096})";
  EXPECT_EQ(shape_from_hf_config(mistral, "config.json")->kv_window(), 4096);
  const std::string gemma3 = R"({"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 10240,
    "vocab_size": 262144, "sliding_window": 1024, "sliding_window_pattern": 6})";
  const ModelShape g3 = shape_from_hf_config(gemma3, "config.json").value();
  EXPECT_EQ(g3.n_layer_swa, 29);
  EXPECT_EQ(count_params(g3).total(), count_params(preset_shape("gemma3-4b").value()).total());
}

// KV kept per sequence: Mistral 7B (window 4096 on every layer, blocks of 16)
// keeps 4112 positions however long the context; Gemma 2 (global layers too)
// keeps every position, and says so.
TEST(KvPlan, KeptPositionsFollowTheWindow) {
  const ModelShape m = preset_shape("mistral-7b").value();
  const WeightFormat f16 = parse_weight_format("f16").value();
  const KvKept k = kv_tokens_kept(m, 32768, 16);
  EXPECT_EQ(k.n_tokens, 4096 + 16);
  EXPECT_TRUE(k.windowed);
  EXPECT_NE(k.note.find("sliding window 4096 on every layer"), std::string::npos) << k.note;
  EXPECT_DOUBLE_EQ(kv_bytes_kept_per_seq(m, f16, 32768, 16), kv_bytes_per_seq(m, f16, 4112));
  EXPECT_EQ(kv_tokens_kept(m, 1000, 16).n_tokens, 1000);  // inside the window: what there is
  EXPECT_FALSE(kv_tokens_kept(m, 1000, 16).windowed);
  EXPECT_EQ(kv_tokens_kept(m, 32768, 256).n_tokens, 4096 + 256);
  // 128 KiB per token (32 layers x 8 x 128 x 2 x 2 bytes): 80 GB less 14.5 GB
  // of weights holds 15 sequences of 32768 positions, or 121 of the kept 4112.
  const double weights = 14.5e9;
  auto full = max_batch_for_budget({.memory_bytes = 80e9, .weight_bytes = weights,
                                    .kv_bytes_per_seq = kv_bytes_per_seq(m, f16, 32768)});
  auto kept = max_batch_for_budget({.memory_bytes = 80e9, .weight_bytes = weights,
                                    .kv_bytes_per_seq = kv_bytes_kept_per_seq(m, f16, 32768, 16)});
  EXPECT_EQ(full->max_batch, 15);
  EXPECT_EQ(kept->max_batch, 121);

  const ModelShape g = preset_shape("gemma2-9b").value();
  const KvKept gk = kv_tokens_kept(g, 8192, 16);
  EXPECT_EQ(gk.n_tokens, 8192);
  EXPECT_FALSE(gk.windowed);
  EXPECT_NE(gk.note.find("21 of 42 layers"), std::string::npos) << gk.note;
  EXPECT_TRUE(kv_tokens_kept(preset_shape("llama-3-8b").value(), 8192, 16).note.empty());
}

// Decode reads: a windowed layer reads the window's positions only.
TEST(KvPlan, DecodeReadsOfWindowedLayersStopAtTheWindow) {
  const WeightFormat f16 = parse_weight_format("f16").value();
  const Hardware h = hardware_profile("h100").value();
  const ModelShape m = preset_shape("mistral-7b").value();
  const ModelCost c = model_cost(m, uniform_mix(f16), f16);
  EXPECT_DOUBLE_EQ(decode_step(c, h, 4, 32768).kv_bytes, 4 * 4096 * c.kv_bytes_per_token);
  EXPECT_DOUBLE_EQ(decode_step(c, h, 4, 100).kv_bytes, 4 * 101 * c.kv_bytes_per_token);
  // Gemma 2: half the layers read the window, half the whole context.
  const ModelShape g = preset_shape("gemma2-9b").value();
  const ModelCost gc = model_cost(g, uniform_mix(f16), f16);
  EXPECT_DOUBLE_EQ(decode_step(gc, h, 1, 8191).kv_bytes, (0.5 * 8192 + 0.5 * 4096) * gc.kv_bytes_per_token);
  // Without a window nothing changes.
  const ModelShape l = preset_shape("llama-3-8b").value();
  const ModelCost lc = model_cost(l, uniform_mix(f16), f16);
  EXPECT_DOUBLE_EQ(decode_step(lc, h, 2, 8191).kv_bytes, 2 * 8192 * lc.kv_bytes_per_token);
}

}  // namespace
}  // namespace sluice::plan
