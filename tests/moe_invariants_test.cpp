// Invariants of the routed decoder on synthetic models of each MoE family
// (Mixtral-style llama, qwen2moe with its shared expert, qwen3moe with q/k
// norm) and of dense qwen3: decode equals prefill bit for bit, a sequence in a
// batch gets the bits it gets alone, repacked experts give the bits of GGUF
// rows, and the CPU backend agrees with the reference backend.
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/op_test_util.h"
#include "model/model.h"
#include "model/synth.h"

namespace sluice {
namespace {

struct Case {
  std::string preset;
  std::string type;
};

std::shared_ptr<const ModelFile> synth(const Case& c) {
  SynthShape shape = synth_preset(c.preset, 2).value();
  shape.n_vocab = 512;
  // One file per process: ctest runs the tests of one case in parallel.
  const std::string path =
      ::testing::TempDir() + "/moe_" + c.preset + "_" + c.type + "_" + std::to_string(::getpid()) + ".gguf";
  auto n = write_synth_model(SynthOptions{.shape = shape, .type = c.type, .seed = 11, .n_threads = 2}, path);
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  auto mf = open_model_file(path);
  EXPECT_TRUE(mf.ok()) << mf.status().to_string();
  std::remove(path.c_str());  // the mapping outlives the name
  return std::make_shared<const ModelFile>(std::move(*mf));
}

std::vector<int32_t> tokens_of(int64_t n, int32_t salt, int64_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + salt * 11 + 1) % n_vocab);
  return t;
}

class MoeInvariants : public ::testing::TestWithParam<Case> {};

TEST_P(MoeInvariants, DecodeEqualsPrefillBitForBit) {
  auto file = synth(GetParam());
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 32});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t n_vocab = (*m)->hparams().n_vocab, n = 20;
  const std::vector<int32_t> toks = tokens_of(n, 0, n_vocab);
  std::vector<float> prefill(static_cast<size_t>(n * n_vocab)), step(static_cast<size_t>(n_vocab));
  KvCache a = (*m)->make_kv_cache(n), b = (*m)->make_kv_cache(n);
  ASSERT_TRUE((*m)->forward(toks, a, prefill.data(), true).ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE((*m)->forward(std::span(toks.data() + i, 1), b, step.data(), false).ok());
    ASSERT_EQ(std::memcmp(step.data(), prefill.data() + i * n_vocab, static_cast<size_t>(n_vocab) * 4), 0) << i;
  }
}

TEST_P(MoeInvariants, BatchedEqualsAlone) {
  auto file = synth(GetParam());
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 64, .max_seqs = 4});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  const int64_t n_vocab = model.hparams().n_vocab;
  const KvLayout layout = model.kv_layout(model.default_kv_dtype());
  // Three sequences of different lengths in one step, each over its own blocks.
  const int64_t lens[3] = {9, 1, 14};
  std::vector<std::vector<int32_t>> toks, tables;
  for (int i = 0; i < 3; ++i) {
    toks.push_back(tokens_of(lens[i], i + 1, n_vocab));
    tables.push_back({static_cast<int32_t>(2 * i), static_cast<int32_t>(2 * i + 1)});
  }
  KvStore kv = model.backend().create_kv(layout, 6).value();
  std::vector<ForwardSeq> seqs;
  for (int i = 0; i < 3; ++i)
    seqs.push_back({.tokens = toks[static_cast<size_t>(i)], .pos0 = 0, .block_table = tables[static_cast<size_t>(i)],
                    .n_logits = lens[i]});
  std::vector<float> together(static_cast<size_t>((9 + 1 + 14) * n_vocab));
  ASSERT_TRUE(model.forward(seqs, kv, together.data()).ok());
  int64_t row = 0;
  for (int i = 0; i < 3; ++i) {
    KvCache alone = model.make_kv_cache(lens[i]);
    std::vector<float> lg(static_cast<size_t>(lens[i] * n_vocab));
    ASSERT_TRUE(model.forward(toks[static_cast<size_t>(i)], alone, lg.data(), true).ok());
    EXPECT_EQ(std::memcmp(lg.data(), together.data() + row * n_vocab, lg.size() * 4), 0) << "sequence " << i;
    row += lens[i];
  }
}

TEST_P(MoeInvariants, RepackedEqualsRowsAndCpuAgreesWithReference) {
  auto file = synth(GetParam());
  auto packed = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 16});
  auto rows = Model::load(file, ModelOptions{.n_threads = 2, .n_batch = 16, .repack = false});
  auto ref = Model::load(file, ModelOptions{.n_batch = 16, .backend = create_backend({.name = "reference"}).value()});
  ASSERT_TRUE(packed.ok() && rows.ok() && ref.ok());
  const int64_t n_vocab = (*rows)->hparams().n_vocab, n = 12;
  const std::vector<int32_t> toks = tokens_of(n, 5, n_vocab);
  std::vector<float> a(static_cast<size_t>(n * n_vocab)), b(a.size()), c(a.size());
  KvCache ka = (*packed)->make_kv_cache(n), kb = (*rows)->make_kv_cache(n), kc = (*ref)->make_kv_cache(n);
  ASSERT_TRUE((*packed)->forward(toks, ka, a.data(), true).ok());
  ASSERT_TRUE((*rows)->forward(toks, kb, b.data(), true).ok());
  ASSERT_TRUE((*ref)->forward(toks, kc, c.data(), true).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // The CPU's 8-bit activations for quantized weights against float
  // dot products: a few 1e-4 of relative error per matmul, through two layers.
  const double bound = GetParam().type == "f32" ? 1e-8 : 2e-3;
  EXPECT_LT(cpu::testing::nmse(b.data(), c.data(), b.size()), bound);
}

INSTANTIATE_TEST_SUITE_P(Families, MoeInvariants,
                         ::testing::Values(Case{"tiny-mixtral", "q8_0"}, Case{"tiny-mixtral", "q4_0"},
                                           Case{"tiny-mixtral", "f32"}, Case{"tiny-qwen2moe", "q8_0"},
                                           Case{"tiny-qwen2moe", "q4_k"}, Case{"tiny-qwen3moe", "q8_0"},
                                           Case{"tiny-qwen3", "q4_0"}, Case{"tiny-qwen3", "f32"}),
                         [](const auto& info) {
                           std::string name = info.param.preset + "_" + info.param.type;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// An independent implementation on the same files: llama.cpp's logits for the
// Mixtral-style and the qwen2moe (shared expert, no renormalization) synth
// models, f32 throughout, in tests/data/moe_llamacpp_logits.json.
TEST(MoeAgainstLlamaCpp, LogitsOfSynthModelsMatch) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/tests/data/moe_llamacpp_logits.json");
  ASSERT_TRUE(in.good());
  const auto ref = nlohmann::json::parse(in);
  const auto toks = ref["tokens"].get<std::vector<int32_t>>();
  for (const std::string preset : {"tiny-mixtral", "tiny-qwen2moe"}) {
    auto m = Model::load(synth({preset, "f32"}), ModelOptions{.n_threads = 2});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const int64_t n_vocab = (*m)->hparams().n_vocab;
    KvCache kv = (*m)->make_kv_cache(16, KvDtype::kF32).value();
    std::vector<float> lg(toks.size() * static_cast<size_t>(n_vocab));
    ASSERT_TRUE((*m)->forward(toks, kv, lg.data(), true).ok());
    const auto& want = ref["models"][preset];
    double max_err = 0;
    for (size_t p = 0; p < toks.size(); ++p)
      for (int64_t v = 0; v < n_vocab; ++v)
        max_err = std::max(max_err, std::abs(want[p][v].get<double>() - lg[p * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]));
    EXPECT_LT(max_err, 1e-4) << preset;  // measured: 1.3e-6 and 1.4e-6
  }
}

}  // namespace
}  // namespace sluice
