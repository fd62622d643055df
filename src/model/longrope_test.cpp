// LongRoPE (Phi-3 128k, Phi-3.5), model/rope_scaling.h:
//   - the rope tables against a scalar reference written from the definition;
//   - the factor set is chosen once, from the planned context, so decode
//     equals prefill bit for bit past the original context;
//   - llama.cpp's logits and greedy tokens on tiny-phi3-128k at a context that
//     selects the short factors and one that selects the long ones
//     (tests/data/longrope_llamacpp.json, produced as its "source" says);
//   - an HF folder with the factors in config.json, and the GGUF converted
//     from it, load to the same model as the synth file;
//   - malformed factors are refused, naming the tensor or field.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/rope_tables.h"
#include "format/gguf_writer.h"
#include "format/hf_config.h"
#include "format/safetensors.h"
#include "model/greedy_test_util.h"
#include "model/hf_folder_test_util.h"
#include "model/model.h"
#include "model/rope_scaling.h"
#include "model/synth.h"

namespace sluice {
namespace {

constexpr int64_t kVocab = 512;
constexpr int64_t kOrigCtx = 64;  // tiny-phi3-128k's original context

// A path under the test temp dir that is this test's own (ctest runs cases in parallel).
std::string case_path(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "/" + t->test_suite_name() + "." + t->name() + "_" + name;
}

std::shared_ptr<const ModelFile> open_gguf(const std::string& path) {
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  return std::make_shared<const ModelFile>(std::move(*mf));
}

// `sluice synth --preset tiny-phi3-128k --type f32 --vocab 512 --seed 11`.
std::string synth_longrope() {
  SynthShape shape = synth_preset("tiny-phi3-128k").value();
  shape.n_vocab = kVocab;
  const std::string path = case_path("tiny-phi3-128k.gguf");
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = "f32", .seed = 11, .n_threads = 2}, path);
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  return path;
}

std::vector<float> factors_of(const ModelFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(static_cast<size_t>(t->ne[0]));
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

std::vector<float> prefill_logits(Model& m, const std::vector<int32_t>& toks) {
  std::vector<float> out(toks.size() * static_cast<size_t>(m.hparams().n_vocab));
  KvCache kv = m.make_kv_cache(static_cast<int64_t>(toks.size()), KvDtype::kF32).value();
  EXPECT_TRUE(m.forward(toks, kv, out.data(), true).ok());
  return out;
}

std::vector<int32_t> tokens_of(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 1) % kVocab);
  return t;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max<double>(m, std::abs(a[i] - b[i]));
  return m;
}

// ---------------------------------------------------------------------------
// The tables: cos_sin[t][i] = m * (cos, sin)(p_t * base^(-2i / n_rot) / d_i),
// computed here in long double straight from that formula.
TEST(LongRopeTables, MatchScalarReference) {
  ModelHparams hp;
  hp.n_rot = 96;
  hp.rope_freq_base = 10000.0f;
  hp.rope_attn_factor = 1.1902381f;  // Phi-3-mini-128k: sqrt(1 + ln 32 / ln 4096)
  std::vector<float> d(48);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 1.0f + 0.37f * static_cast<float>(i * i % 17) + 0.01f * static_cast<float>(i);
  const RopeFreqs rf = rope_freqs(hp, d);
  ASSERT_EQ(rf.inv_freq.size(), 48u);
  EXPECT_EQ(rf.magnitude, static_cast<double>(hp.rope_attn_factor));
  const std::vector<int64_t> positions = {0, 1, 7, 4095, 4096, 70000, 131071};
  std::vector<float> cs(positions.size() * 48 * 2, std::numeric_limits<float>::quiet_NaN());
  rope_cos_sin(positions, rf.inv_freq, rf.magnitude, cs.data());
  double max_err = 0;
  for (size_t t = 0; t < positions.size(); ++t) {
    for (size_t i = 0; i < 48; ++i) {
      const long double theta = static_cast<long double>(positions[t]) *
                                std::pow(10000.0L, -2.0L * static_cast<long double>(i) / 96.0L) / d[i];
      const long double m = hp.rope_attn_factor;
      max_err = std::max<double>(max_err, std::abs(static_cast<double>(m * std::cos(theta) - cs[(t * 48 + i) * 2])));
      max_err = std::max<double>(max_err, std::abs(static_cast<double>(m * std::sin(theta) - cs[(t * 48 + i) * 2 + 1])));
    }
  }
  EXPECT_LT(max_err, 2e-7);  // one float rounding of values up to 1.19 (angles to 1.3e5 rad)
  // Without divisors and magnitude the table is plain RoPE.
  hp.rope_attn_factor = 1.0f;
  const RopeFreqs plain = rope_freqs(hp, {});
  EXPECT_EQ(plain.magnitude, 1.0);
  EXPECT_DOUBLE_EQ(plain.inv_freq[5], rf.inv_freq[5] * d[5]);
}

// ---------------------------------------------------------------------------
// The choice: long iff the planned context exceeds the original one.
TEST(LongRopeChoice, ByPlannedContextOnce) {
  const auto file = open_gguf(synth_longrope());
  EXPECT_EQ(file->metadata.get_int("phi3.rope.scaling.original_context_length"), kOrigCtx);
  const double want_attn = std::sqrt(1.0 + std::log(2048.0 / kOrigCtx) / std::log(static_cast<double>(kOrigCtx)));
  EXPECT_NEAR(*file->metadata.get_float("phi3.rope.scaling.attn_factor"), want_attn, 1e-6);
  const std::pair<int64_t, LongRopeFactors> cases[] = {
      {kOrigCtx, LongRopeFactors::kShort}, {kOrigCtx + 1, LongRopeFactors::kLong}, {0, LongRopeFactors::kLong}};
  std::vector<std::vector<float>> logits;
  for (const auto& [n_ctx, want] : cases) {
    auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 32, .n_ctx_max = n_ctx});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->longrope_factors(), want) << "n_ctx_max " << n_ctx << ": " << longrope_factors_name(want);
    EXPECT_NEAR((*m)->hparams().rope_attn_factor, want_attn, 1e-6);
    logits.push_back(prefill_logits(**m, tokens_of(24)));
  }
  // The factor sets differ, and so do the logits; the same set gives the same bits.
  EXPECT_GT(max_abs_diff(logits[0], logits[1]), 1e-3);
  EXPECT_EQ(std::memcmp(logits[1].data(), logits[2].data(), logits[1].size() * 4), 0);

  SynthShape plain = synth_preset("tiny-phi3").value();
  plain.n_vocab = kVocab;
  ASSERT_TRUE(write_synth_model(SynthOptions{.shape = plain, .type = "f32", .seed = 11}, case_path("plain.gguf")).ok());
  auto m = Model::load(open_gguf(case_path("plain.gguf")), ModelOptions{.n_threads = 1});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->longrope_factors(), LongRopeFactors::kNone);
}

// Past the original context the long factors stay in force for the whole
// sequence: token-by-token decode gives the bits of one prefill, across the
// point (position 64) where transformers would switch sets.
TEST(LongRopeChoice, DecodeEqualsPrefillBitForBitAcrossTheOriginalContext) {
  auto m = Model::load(open_gguf(synth_longrope()), ModelOptions{.n_threads = 2, .n_batch = 16, .n_ctx_max = 256});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->longrope_factors(), LongRopeFactors::kLong);
  const int64_t n = 2 * kOrigCtx;
  const auto toks = tokens_of(n);
  const auto all = prefill_logits(**m, toks);
  KvCache kv = (*m)->make_kv_cache(n, KvDtype::kF32).value();
  std::vector<float> one(static_cast<size_t>(kVocab));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*m)->forward(std::span(toks.data() + i, 1), kv, one.data(), false).ok());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + i * kVocab, one.size() * 4), 0) << "token " << i;
  }
}

// Two sequences of different lengths past the original context in one step
// give the bits each gives alone (the factor set is the model's, not a
// sequence's).
TEST(LongRopeChoice, BatchedEqualsAloneBitForBit) {
  auto m = Model::load(open_gguf(synth_longrope()), ModelOptions{.n_threads = 2, .n_batch = 256, .n_ctx_max = 256});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->longrope_factors(), LongRopeFactors::kLong);
  const auto a = tokens_of(100);
  std::vector<int32_t> b(80);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>((i * 11 + 3) % kVocab);
  auto run = [&](std::vector<int> which) {
    KvCache kv = (*m)->make_kv_cache(256, KvDtype::kF32).value();  // blocks of 16: a in 0..7, b in 8..15
    const std::span<const int32_t> table = kv.block_table();
    std::vector<ForwardSeq> seqs;
    size_t n = 0;
    for (int w : which) {
      const std::vector<int32_t>& t = w == 0 ? a : b;
      seqs.push_back(ForwardSeq{.tokens = t, .pos0 = 0, .block_table = table.subspan(w == 0 ? 0 : 8, 8),
                                .n_logits = static_cast<int64_t>(t.size())});
      n += t.size();
    }
    std::vector<float> out(n * kVocab);
    EXPECT_TRUE((*m)->forward(seqs, kv.store(), out.data()).ok());
    return out;
  };
  const auto alone_a = run({0}), alone_b = run({1}), both = run({0, 1});
  ASSERT_EQ(both.size(), alone_a.size() + alone_b.size());
  EXPECT_EQ(std::memcmp(both.data(), alone_a.data(), alone_a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(both.data() + alone_a.size(), alone_b.data(), alone_b.size() * 4), 0);
}

// ---------------------------------------------------------------------------
// llama.cpp on the same file, at n_ctx 64 (short factors) and 128 (long).
TEST(LongRopeAgainstLlamaCpp, LogitsAndGreedyTokensMatch) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/tests/data/longrope_llamacpp.json");
  ASSERT_TRUE(in.good()) << "tests/data/longrope_llamacpp.json is part of the tree";
  const auto ref = nlohmann::json::parse(in);
  const auto toks = ref["tokens"].get<std::vector<int32_t>>();
  const auto file = open_gguf(synth_longrope());
  for (const char* which : {"short", "long"}) {
    const auto& want = ref["contexts"][which];
    const int64_t n_ctx = want["n_ctx"].get<int64_t>();
    auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 32, .n_ctx_max = n_ctx});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_STREQ(longrope_factors_name((*m)->longrope_factors()), which);
    KvCache kv = (*m)->make_kv_cache(n_ctx, KvDtype::kF32).value();
    std::vector<float> lg(toks.size() * kVocab);
    ASSERT_TRUE((*m)->forward(toks, kv, lg.data(), true).ok());
    double max_err = 0;
    for (size_t p = 0; p < toks.size(); ++p)
      for (int64_t v = 0; v < kVocab; ++v)
        max_err = std::max(max_err, std::abs(want["logits"][p][v].get<double>() - lg[p * kVocab + v]));
    EXPECT_LT(max_err, 1e-3) << which;  // measured 2.3e-6 (short), 2.5e-6 (long)
    const std::vector<int32_t> greedy = testing_util::greedy_continuation(
        **m, kv, lg.data() + (toks.size() - 1) * kVocab, kVocab, want["greedy"].size());
    EXPECT_EQ(greedy, want["greedy"].get<std::vector<int32_t>>()) << which;
  }
  // The two goldens differ (the factor sets matter at these positions).
  EXPECT_NE(ref["contexts"]["short"]["logits"][19][0], ref["contexts"]["long"]["logits"][19][0]);
}

// ---------------------------------------------------------------------------
// HF: the synth file's tensors under HF names, its factors in config.json.
std::string hf_config(const ModelFile& g, const std::string& type) {
  nlohmann::json c = {{"model_type", "phi3"}, {"hidden_size", 64}, {"intermediate_size", 128},
                      {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"vocab_size", kVocab}, {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0}, {"sliding_window", 8}, {"tie_word_embeddings", false},
                      {"original_max_position_embeddings", kOrigCtx}};
  c["rope_scaling"] = {{"type", type},
                       {"long_factor", factors_of(g, "rope_factors_long.weight")},
                       {"short_factor", factors_of(g, "rope_factors_short.weight")}};
  return c.dump();
}

TEST(LongRopeHf, FolderAndItsConversionLoadToTheSameModel) {
  const auto gguf = open_gguf(synth_longrope());
  const auto toks = tokens_of(20);
  for (const char* type : {"longrope", "su"}) {
    const std::string dir = case_path(std::string("hf_") + type);
    testing_util::write_hf_folder(*gguf, dir, hf_config(*gguf, type));
    auto hf = read_hf_model(dir);
    ASSERT_TRUE(hf.ok()) << hf.status().to_string();
    EXPECT_EQ(factors_of(*hf, "rope_factors_long.weight"), factors_of(*gguf, "rope_factors_long.weight"));
    EXPECT_EQ(factors_of(*hf, "rope_factors_short.weight"), factors_of(*gguf, "rope_factors_short.weight"));
    EXPECT_EQ(hf->metadata.get_int("phi3.rope.scaling.original_context_length"), kOrigCtx);
    EXPECT_EQ(hf->metadata.get_float("phi3.rope.scaling.attn_factor"),
              gguf->metadata.get_float("phi3.rope.scaling.attn_factor"));
    // `sluice convert`: every tensor and key of the imported folder into a GGUF.
    GgufWriter w;
    w.set_metadata(hf->metadata);
    for (const TensorInfo& t : hf->tensors) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.ne, t.data).ok());
    const std::string converted = case_path(std::string("converted_") + type + ".gguf");
    ASSERT_TRUE(w.write(converted).ok());
    std::vector<std::shared_ptr<const ModelFile>> files = {gguf, std::make_shared<const ModelFile>(std::move(*hf)),
                                                           open_gguf(converted)};
    for (const int64_t n_ctx : {kOrigCtx, int64_t{2048}}) {
      std::vector<std::vector<float>> out;
      for (const auto& f : files) {
        auto m = Model::load(f, ModelOptions{.n_threads = 2, .n_batch = 32, .n_ctx_max = n_ctx});
        ASSERT_TRUE(m.ok()) << type << ": " << m.status().to_string();
        out.push_back(prefill_logits(**m, toks));
      }
      EXPECT_EQ(max_abs_diff(out[0], out[1]), 0.0) << type << " n_ctx " << n_ctx;
      EXPECT_EQ(max_abs_diff(out[0], out[2]), 0.0) << type << " n_ctx " << n_ctx;
    }
  }
}

// ---------------------------------------------------------------------------
// Malformed factors.
StatusOr<std::unique_ptr<Model>> load_with(const std::string& path, const std::string& name, std::vector<float> v,
                                           std::vector<std::vector<uint8_t>>* keep) {
  auto opened = open_model_file(path);
  EXPECT_TRUE(opened.ok());
  ModelFile f = std::move(*opened);
  auto it = std::find_if(f.tensors.begin(), f.tensors.end(), [&](const TensorInfo& t) { return t.name == name; });
  if (v.empty()) {
    f.tensors.erase(it);
  } else {
    keep->emplace_back(v.size() * sizeof(float));
    std::memcpy(keep->back().data(), v.data(), keep->back().size());
    *it = TensorInfo{.name = name, .type = DType::kF32, .ne = {static_cast<int64_t>(v.size())},
                     .n_bytes = keep->back().size(), .data = keep->back().data()};
  }
  return Model::load(std::make_shared<const ModelFile>(std::move(f)), ModelOptions{.n_threads = 1});
}

TEST(LongRopeWeights, MalformedFactorsAreRefusedByName) {
  const std::string path = synth_longrope();
  std::vector<std::vector<uint8_t>> keep;
  auto m = load_with(path, "rope_factors_long.weight", std::vector<float>(5, 1.0f), &keep);  // 8 pairs expected
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'rope_factors_long.weight' has shape [5], expected [8]"), std::string::npos)
      << m.status().message();
  m = load_with(path, "rope_factors_short.weight", {}, &keep);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("has only rope_factors_long.weight"), std::string::npos) << m.status().message();
  std::vector<float> zero(8, 1.0f);
  zero[3] = 0.0f;
  m = load_with(path, "rope_factors_short.weight", zero, &keep);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("rope_factors_short.weight[3] is 0"), std::string::npos) << m.status().message();

  // HF: lists of the wrong length, unequal lists, a missing original context.
  const auto gguf = open_gguf(path);
  auto cfg = nlohmann::json::parse(hf_config(*gguf, "longrope"));
  cfg["rope_scaling"]["long_factor"] = std::vector<double>(5, 1.0);
  cfg["rope_scaling"]["short_factor"] = std::vector<double>(5, 1.0);
  auto bad = parse_hf_config(cfg.dump(), "config.json", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("long_factor has 5 entries, expected 8"), std::string::npos)
      << bad.status().message();
  cfg["rope_scaling"]["short_factor"] = std::vector<double>(8, 1.0);
  bad = parse_hf_config(cfg.dump(), "config.json", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("long_factor has 5 entries but short_factor 8"), std::string::npos)
      << bad.status().message();
  cfg = nlohmann::json::parse(hf_config(*gguf, "longrope"));
  cfg.erase("original_max_position_embeddings");
  bad = parse_hf_config(cfg.dump(), "config.json", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("original_max_position_embeddings"), std::string::npos);
  cfg = nlohmann::json::parse(hf_config(*gguf, "longrope"));
  cfg["rope_scaling"]["short_factor"][2] = -1.0;
  bad = parse_hf_config(cfg.dump(), "config.json", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("short_factor[2] is -1"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace sluice
