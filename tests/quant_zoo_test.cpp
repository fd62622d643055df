// Real data for every block type: shared/models/quant-zoo holds one small
// random-weight llama model quantized by llama.cpp's llama-quantize into every
// popular mix (Q2_K .. Q8_0, IQ4_NL, IQ4_XS; SOURCES.md), and reference.json
// llama.cpp's logits of every prompt position and its 16 greedy tokens, per file.
// Each file must load, reproduce those logits within kLogitTolerance, and
// predict llama.cpp's greedy tokens wherever the choice is clear.
//
// Tolerances. Both engines multiply quantized weights with activations rounded
// to int8 in blocks (llama.cpp: Q8_0 / Q8_1 for 32-element weight blocks, Q8_K
// for 256-element ones; sluice: ActQ8x64 / ActQ8x256, the same granularity,
// act_quant.h). That rounding moves each element by up to d/2, d = amax / 127
// of its block: about 0.7% relative per dot product (nmse ~5e-5 in the per-op
// suite, quant_matmul_test.cpp). The two engines round the same way, but not
// always the same values: llama.cpp keeps the KV cache and attention in f16
// and stores Q8_0 scales as f16, so an activation differs in its last bits
// and, near a rounding boundary (q up to 127, so a relative change of 1e-3 moves
// x / d by up to 0.13), lands on the other integer. Those flips are close to
// independent int8 rounding noise; through 4 layers of 7 matmuls each they
// reach the logits (standard deviation about 1 with these random weights) as
// an rms difference of 1.5-2%. Measured against reference.json (AVX2 build):
//   f16                    rms 0.0006, max 0.003  (no int8 rounding on either side)
//   Q8_0, Q4_0 .. Q5_1,    rms 0.015-0.017, max 0.06-0.08
//   IQ4_NL (blocks of 32)
//   K mixes, IQ4_XS        rms 0.019-0.020, max 0.08-0.10
// The existing types (Q8_0, Q4_0, Q4_K, Q6_K) sit in the same bands as the new
// ones. So: rms < kLogitRmsTolerance = 0.03 and every logit within
// kLogitTolerance = 0.15 (the max over 15 x 4096 logits is about 5 rms).
// A wrong layout, bit order or sub-block scale moves logits by O(1) and fails
// both by far.
//
// Every other backend but the reference (cuda where it is built) runs the same
// files against the same bounds ("tiny-Q4_0.gguf@cuda"): its kernels round
// activations as the CPU's do (int8) or not at all, never more coarsely.
//
// Greedy tokens: the reference's 16 greedy tokens are fed back (teacher forcing)
// so every position is compared even after a near tie. Where llama.cpp's top two
// logits (prompt's last position), or sluice's (later positions, where the
// reference gives only the token), are more than kLogitTolerance apart, both
// engines must pick the same token: the difference of two logits' errors has a
// standard deviation of about 0.03 (rms above, times sqrt 2), so such a gap is
// over 5 of them.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"
#include "format/gguf_reader.h"
#include "golden_params.h"
#include "model/model.h"
#include "quant/quant_mix.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

using testing::model_path;

constexpr double kLogitTolerance = 0.15;     // every logit
constexpr double kLogitRmsTolerance = 0.03;  // over all prompt positions

// Index of the largest logit and the gap to the second largest.
std::pair<int64_t, double> top2(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (logits[v] > logits[best]) best = v;
  double second = -INFINITY;
  for (int64_t v = 0; v < n; ++v)
    if (v != best) second = std::max(second, static_cast<double>(logits[v]));
  return {best, logits[best] - second};
}

class QuantZooTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantZooTest, LogitsAndGreedyTokensMatchLlamaCpp) {
  const std::string dir = model_path("quant-zoo");
  SKIP_UNLESS_EXISTS(dir + "/reference.json");
  const testing::GoldenParam param = testing::parse_golden_param(GetParam());
  if (!param.skip.empty()) GTEST_SKIP() << param.skip;
  const std::string name = param.format;
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json all_ref = nlohmann::json::parse(in);
  ASSERT_TRUE(all_ref["files"].contains(name)) << name;
  const nlohmann::json& ref = all_ref["files"][name];

  auto mf = read_gguf(dir + "/" + name);
  ASSERT_TRUE(mf.ok()) << mf.status().to_string();
  auto file = std::make_shared<const ModelFile>(std::move(*mf));
  auto m = Model::load(file, ModelOptions{.n_threads = 2, .backend = param.backend});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;

  const std::vector<int32_t> prompt = ref["ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy = ref["greedy"].get<std::vector<int32_t>>();
  auto tok = Tokenizer::from_metadata(file->metadata);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->encode(all_ref["prompt"].get<std::string>(), true), prompt);

  // Prompt and greedy tokens in one pass (the last greedy token predicts nothing).
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), greedy.begin(), greedy.end() - 1);
  const int64_t n_vocab = model.hparams().n_vocab;
  const int64_t n_pos = static_cast<int64_t>(seq.size());
  std::vector<float> logits(static_cast<size_t>(n_pos * n_vocab));
  KvCache kv = model.make_kv_cache(n_pos);
  ASSERT_TRUE(model.forward(std::span<const int32_t>(seq), kv, logits.data(), true).ok());

  // Logits of every prompt position.
  const auto& ref_logits = ref["logits"];
  ASSERT_EQ(ref_logits.size(), prompt.size());
  double max_err = 0.0, sum_sq = 0.0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    ASSERT_EQ(static_cast<int64_t>(ref_logits[p].size()), n_vocab);
    for (int64_t v = 0; v < n_vocab; ++v) {
      const double e = std::fabs(logits[p * n_vocab + v] - ref_logits[p][v].get<double>());
      max_err = std::max(max_err, e);
      sum_sq += e * e;
    }
  }
  const double rms_err = std::sqrt(sum_sq / (static_cast<double>(prompt.size()) * n_vocab));
  EXPECT_LT(max_err, kLogitTolerance) << name;
  EXPECT_LT(rms_err, kLogitRmsTolerance) << name;

  // Greedy tokens where the top two are separated by more than the tolerance.
  const std::vector<float> last = ref_logits.back().get<std::vector<float>>();
  const auto [ref_best, ref_gap] = top2(last.data(), n_vocab);
  EXPECT_EQ(ref_best, greedy[0]) << name << ": the reference's own first greedy token";
  int n_checked = 0;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const int64_t p = static_cast<int64_t>(prompt.size() + i) - 1;  // predicts greedy[i]
    const auto [best, gap] = top2(logits.data() + p * n_vocab, n_vocab);
    const double decisive_gap = i == 0 ? ref_gap : gap;
    if (decisive_gap <= kLogitTolerance) continue;
    ++n_checked;
    EXPECT_EQ(best, greedy[i]) << name << " greedy token " << i << " (gap " << decisive_gap << ")";
  }
  std::printf("%-24s max |logit error| %.4f (bound %.2f), rms %.5f (bound %.2f); %d of %zu greedy tokens decisive\n",
              GetParam().c_str(), max_err, kLogitTolerance, rms_err, kLogitRmsTolerance, n_checked, greedy.size());
}

// Every file on the CPU, then on every other registered backend but the reference.
std::vector<std::string> zoo_params() {
  const std::vector<std::string> files = {
      "tiny-f16.gguf",    "tiny-Q8_0.gguf",   "tiny-Q6_K.gguf",   "tiny-Q5_K_M.gguf", "tiny-Q5_K_S.gguf",
      "tiny-Q5_1.gguf",   "tiny-Q5_0.gguf",   "tiny-Q4_K_M.gguf", "tiny-Q4_K_S.gguf", "tiny-Q4_1.gguf",
      "tiny-Q4_0.gguf",   "tiny-IQ4_NL.gguf", "tiny-IQ4_XS.gguf", "tiny-Q3_K_L.gguf", "tiny-Q3_K_M.gguf",
      "tiny-Q3_K_S.gguf", "tiny-Q2_K.gguf"};
  std::vector<std::string> params = files;
  for (const RegisteredBackend& b : registered_backends()) {
    const std::string be = b.name;
    if (be == BackendOptions{}.name || be == "reference") continue;
    for (const std::string& f : files) params.push_back(f + "@" + be);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(EveryMix, QuantZooTest, ::testing::ValuesIn(zoo_params()), [](const auto& info) {
  std::string n = info.param.substr(5);  // past "tiny-"
  n.erase(n.find(".gguf"), 5);
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '@', '_');
  return n;
});

// sluice's rules for llama.cpp's mixes (quant/quant_mix.h) choose, tensor by
// tensor, the types llama-quantize chose in these files, and the same file type.
TEST(QuantZooMixes, PerTensorTypesMatchLlamaQuantize) {
  const std::string dir = model_path("quant-zoo");
  SKIP_UNLESS_EXISTS(dir + "/tiny-Q4_K_M.gguf");
  for (const char* mix_name : {"Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
                               "IQ4_XS"}) {
    auto mf = read_gguf(dir + "/tiny-" + mix_name + ".gguf");
    ASSERT_TRUE(mf.ok()) << mf.status().to_string();
    auto mix = quant_mix_from_name(mix_name);
    ASSERT_TRUE(mix.ok()) << mix.status().to_string();
    ASSERT_TRUE(mix->is_mix) << mix_name;
    EXPECT_EQ(mf->metadata.get_int("general.file_type"), mix->file_type) << mix_name;
    const int64_t n_layer = *mf->metadata.get_int("llama.block_count");
    const int64_t n_gqa = *mf->metadata.get_int("llama.attention.head_count") /
                          *mf->metadata.get_int("llama.attention.head_count_kv");
    int n_matrices = 0;
    for (const TensorInfo& t : mf->tensors) {
      if (t.ne.size() != 2) continue;
      DType type = DType::kF32;
      ASSERT_TRUE(quant_mix_type(*mix, MixTensor{.name = t.name, .ne0 = t.ne[0], .n_layer = n_layer, .n_gqa = n_gqa},
                                 &type));
      EXPECT_EQ(dtype_name(type), std::string(dtype_name(t.type))) << mix_name << " " << t.name;
      ++n_matrices;
    }
    EXPECT_EQ(n_matrices, 2 + 7 * n_layer) << mix_name;
  }
}

// The tensor types of two GGUF files, name by name; empty string if they agree.
std::string type_differences(const ModelFile& a, const ModelFile& b) {
  std::string diff;
  if (a.tensors.size() != b.tensors.size()) return "tensor counts differ";
  for (const TensorInfo& t : a.tensors) {
    const TensorInfo* u = nullptr;
    for (const TensorInfo& v : b.tensors)
      if (v.name == t.name) u = &v;
    if (u == nullptr) diff += t.name + " missing; ";
    else if (u->type != t.type) diff += t.name + ": " + dtype_name(t.type) + " vs " + dtype_name(u->type) + "; ";
  }
  return diff;
}

// `sluice synth --type MIX` at the tiny shape (the zoo's base) and `sluice
// convert --type MIX` of the zoo's f16 file both give each tensor the type
// llama-quantize gave it, and the converted file reproduces llama.cpp's logits.
TEST(QuantZooMixes, SynthAndConvertWriteLlamaCppsMixes) {
  const std::string dir = model_path("quant-zoo");
  SKIP_UNLESS_EXISTS(dir + "/tiny-f16.gguf");
  for (const char* mix : {"q3_k_m", "q5_k_m", "iq4_xs"}) {
    std::string upper = mix;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto llama = read_gguf(dir + "/tiny-" + upper + ".gguf");
    ASSERT_TRUE(llama.ok()) << llama.status().to_string();

    const std::string synth_out = ::testing::TempDir() + "/zoo_synth_" + mix + ".gguf";
    testing::CliResult s = testing::run_cli("synth --preset tiny --seed 7 --type " + std::string(mix) + " -o " + synth_out);
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto synth = read_gguf(synth_out);
    ASSERT_TRUE(synth.ok()) << synth.status().to_string();
    EXPECT_EQ(type_differences(*synth, *llama), "") << "synth " << mix;
    EXPECT_EQ(synth->metadata.get_int("general.file_type"), llama->metadata.get_int("general.file_type"));

    const std::string conv_out = ::testing::TempDir() + "/zoo_convert_" + mix + ".gguf";
    testing::CliResult c = testing::run_cli("convert " + dir + "/tiny-f16.gguf --type " + mix + " -o " + conv_out);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    auto conv = read_gguf(conv_out);
    ASSERT_TRUE(conv.ok()) << conv.status().to_string();
    EXPECT_EQ(type_differences(*conv, *llama), "") << "convert " << mix;
    EXPECT_EQ(conv->metadata.get_int("general.file_type"), llama->metadata.get_int("general.file_type"));
  }
}

}  // namespace
}  // namespace sluice
