// End-to-end tests of the sluice CLI binary: the commands the README documents,
// their outputs against the reference, and clean failures on bad input.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backend/backend_registry.h"
#include "base/test_data.h"
#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::run_cli;

using testing::model_path;

// The shipped model (models/) and its golden outputs (tests/data/): always here.
const std::string kStories = testing::shipped_model_path("stories260K.gguf");

nlohmann::json reference() {
  std::ifstream in(testing::stories260k_reference_path());
  return nlohmann::json::parse(in);
}

TEST(Cli, RunJsonGivesReferenceGreedyTokens) {
  const auto ref = reference();
  const auto& g = ref["generation"][1];  // "Once upon a time", 64 steps
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  const size_t n_prompt = g["prompt_tokens"].size();
  const std::vector<int32_t> expected(all.begin() + static_cast<long>(n_prompt), all.end());
  std::vector<std::string> models = {kStories};
  if (testing::path_exists(model_path("stories260K/hf"))) models.push_back(model_path("stories260K/hf"));
  for (const std::string& m : models) {
    CliResult r = run_cli("run -m " + m + " -p 'Once upon a time' -n " + std::to_string(expected.size()) +
                       " --temp 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), expected) << m;
    EXPECT_FALSE(j["text"].get<std::string>().empty());
  }
  // The README's check of a result on the scalar reference backend.
  CliResult r = run_cli("run -m " + kStories + " -p 'Once upon a time' -n " + std::to_string(expected.size()) +
                        " --temp 0 --json --backend reference");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
}

// The README's adapter run: stories260K + the reference fine-tune gives its
// greedy tokens; two adapters at half scale each sum to the whole delta; a
// file that is no adapter is refused by name.
TEST(Cli, RunWithLoraGivesTheFineTunesGreedyTokens) {
  const std::string ref_path = model_path("stories260K-lora/reference.json");
  SKIP_UNLESS_EXISTS(ref_path);
  std::ifstream in(ref_path);
  const auto g = nlohmann::json::parse(in)["greedy_trained"];
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expected(all.begin() + static_cast<long>(g["prompt_ids"].size()), all.end());
  const std::string lora = model_path("stories260K-lora/lora-trained.gguf");
  const std::string run = "run -m " + kStories + " -p 'Once upon a time' -n " + std::to_string(expected.size()) +
                          " --temp 0 --ignore-eos --json ";
  CliResult r = run_cli(run + "--lora " + lora);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
  EXPECT_NE(r.err.find("LoRA adapter stories260K-lora (rank 4, scale 1, 35 matrices"), std::string::npos) << r.err;
  CliResult halves = run_cli(run + "--lora " + lora + ":0.5 --lora " + lora + ":0.5");
  ASSERT_EQ(halves.exit_code, 0) << halves.err;
  EXPECT_EQ(nlohmann::json::parse(halves.out)["tokens"].get<std::vector<int32_t>>(), expected);
  CliResult bad = run_cli(run + "--lora " + kStories);
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find("is not a LoRA adapter"), std::string::npos) << bad.err;
  CliResult missing = run_cli(run + "--lora /no/such/adapter.gguf");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_NE(missing.err.find("--lora /no/such/adapter.gguf"), std::string::npos) << missing.err;
}

// The README's GPU run: the reference tokens on a GPU; without one (or
// without nvcc) a clear refusal and exit code 1, never a crash. gpu-bench
// likewise.
TEST(Cli, RunOnCudaGivesReferenceTokensOrSaysWhyNot) {
  const auto ref = reference();
  const auto& g = ref["generation"][1];
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  const size_t n_prompt = g["prompt_tokens"].size();
  const std::vector<int32_t> expected(all.begin() + static_cast<long>(n_prompt), all.end());
  const std::string run =
      "run -m " + kStories + " -p 'Once upon a time' -n " + std::to_string(expected.size()) + " --temp 0 --json ";
  // --gpu-budget is GPU memory: refused by name on another backend, anywhere.
  CliResult cpu = run_cli(run + "--backend cpu --gpu-budget 500K");
  EXPECT_EQ(cpu.exit_code, 1) << cpu.err;
  EXPECT_NE(cpu.err.find("--gpu-budget"), std::string::npos) << cpu.err;
  CliResult r = run_cli(run + "--backend cuda");
  if (r.exit_code != 0) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
    CliResult b = run_cli("gpu-bench --types q4_0 --tokens 1 --reps 1");
    EXPECT_EQ(b.exit_code, 1) << b.err;
    EXPECT_NE(b.err.find("error: "), std::string::npos) << b.err;
    GTEST_SKIP() << "no GPU here: " << r.err;
  }
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
  // Under a GPU budget below the model's 1.0 MB: the first dispatches and the
  // head resident, the rest streamed through the ring, the same tokens; below
  // the head and the ring, a refusal that names the smallest budget.
  CliResult s = run_cli(run + "--backend cuda --gpu-budget 500K");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.err.find("stream from pinned host memory"), std::string::npos) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["tokens"].get<std::vector<int32_t>>(), expected);
  CliResult t = run_cli(run + "--backend cuda --gpu-budget 100K");
  EXPECT_EQ(t.exit_code, 1) << t.err;
  EXPECT_NE(t.err.find("smallest"), std::string::npos) << t.err;
}

// --backend's help lists every registered backend, and for one that cannot
// run here, why.
TEST(Cli, BackendHelpSaysWhichBackendsRunHere) {
  CliResult r = run_cli("run --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--backend"), std::string::npos) << r.out;
  for (const RegisteredBackend& b : registered_backends()) {
    EXPECT_NE(r.out.find(std::string("  ") + b.name + " "), std::string::npos) << b.name << "\n" << r.out;
    const std::string why = b.unavailable();
    if (!why.empty()) {
      EXPECT_NE(r.out.find("unavailable: " + why), std::string::npos) << r.out;
    }
  }
}

TEST(Cli, RunStreamsOnlyTheContinuation) {
  CliResult r = run_cli("run -m " + kStories + " -p 'Once upon a time' -n 20 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("Once upon a time"), std::string::npos) << "prompt must not be echoed: " << r.out;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("TTFT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  const std::string cmd = "run -m " + kStories +
                          " -p 'Lily' -n 40 --temp 1.0 --top-k 40 --top-p 0.9 --seed 1234 --json";
  CliResult a = run_cli(cmd), b = run_cli(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, TokenizeMatchesReference) {
  const auto ref = reference();
  const auto& t = ref["tokenization"][0];
  CliResult r = run_cli("tokenize -m " + kStories + " -p '" + t["text"].get<std::string>() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int32_t> expected = {1};  // add_bos
  for (int32_t id : t["ids_no_bos"].get<std::vector<int32_t>>()) expected.push_back(id);
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), expected);
}

TEST(Cli, InfoPrintsMetadataAndTensors) {
  CliResult r = run_cli("info " + kStories);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("blk.4.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("tensors: 48"), std::string::npos);
  // The architecture's table names each tensor's role.
  EXPECT_NE(r.out.find("architecture: llama"), std::string::npos) << r.out;
  // The tokenizer (and a BPE file's pre-tokenizer) and the chat template are named.
  EXPECT_NE(r.out.find("tokenizer: llama (SentencePiece), 512 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat template: none in the file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attn_output"), std::string::npos);
  EXPECT_EQ(r.out.find("missing:"), std::string::npos);
}

// No -m: the shipped stories260K, named in one line on stderr, tells the
// reference story; bench-experts takes the shipped stories-moe; a given -m
// prints no notice.
TEST(Cli, WithoutAModelTheShippedOneRunsAndIsNamed) {
  const std::string notice = "[sluice] no model given: using the shipped stories260K (" + kStories + ")\n";
  const auto ref = reference();
  const auto& g = ref["generation"][1];  // "Once upon a time", 64 steps
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> expected(all.begin() + static_cast<long>(g["prompt_tokens"].size()), all.end());
  CliResult r = run_cli("run -p 'Once upon a time' -n " + std::to_string(expected.size()) + " --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.rfind(notice, 0), 0u) << "the notice comes first, once: " << r.err;
  EXPECT_EQ(r.err.find("no model given", notice.size()), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
  CliResult text = run_cli("run -p 'Once upon a time' -n 24 --temp 0");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(", there was a little girl named Lily."), std::string::npos) << text.out;

  CliResult given = run_cli("run -m " + kStories + " -p 'Once upon a time' -n 4 --temp 0");
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(given.err.find("no model given"), std::string::npos) << given.err;
  CliResult info = run_cli("info --no-tensors");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_EQ(info.err, notice);
  EXPECT_NE(info.out.find("file: " + kStories + " (gguf v3"), std::string::npos) << info.out;
  CliResult tok = run_cli("tokenize -p 'Once upon a time'");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_EQ(nlohmann::json::parse(tok.out).get<std::vector<int32_t>>(), g["prompt_tokens"].get<std::vector<int32_t>>());
  CliResult experts = run_cli("bench-experts -p 'Once upon a time' -n 4 -t 1 --json");
  ASSERT_EQ(experts.exit_code, 0) << experts.err;
  EXPECT_NE(experts.err.find("using the shipped stories-moe (" + testing::shipped_model_path("stories-moe-f16.gguf") + ")"),
            std::string::npos)
      << experts.err;
  // The help says what the default is.
  CliResult help = run_cli("run --help");
  EXPECT_NE(help.out.find("(default: the shipped stories260K)"), std::string::npos) << help.out;
}

// A copy of the binary finds a models/ folder beside it before the source
// tree's (compiled in), and falls through to that one without it.
TEST(Cli, TheShippedModelIsFoundBesideTheBinaryFirst) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::cli_temp_path("beside")).lexically_normal();
  fs::remove_all(dir);
  fs::create_directories(dir / "models");
  fs::copy_file(SLUICE_BINARY, dir / "sluice");
  fs::copy_file(kStories, dir / "models" / "stories260K.gguf");
  CliResult r = testing::run_binary((dir / "sluice").string(), "info --no-tensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("using the shipped stories260K (" + (dir / "models" / "stories260K.gguf").string() + ")"),
            std::string::npos)
      << r.err;
  fs::remove(dir / "models" / "stories260K.gguf");
  CliResult fallback = testing::run_binary((dir / "sluice").string(), "info --no-tensors");
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_NE(fallback.err.find("(" + kStories + ")"), std::string::npos) << fallback.err;
  fs::remove_all(dir);
}

// convert --type re-quantizes a routed model's stacked experts ([n_embd, n_ff,
// n_expert]) with the other matrices, and leaves its routers f32; the result,
// about half the f16 file, runs and starts the same greedy story as the shipped
// f16 stories-moe (they part at the 29th token, a near tie).
TEST(Cli, ConvertRequantizesTheExpertsAndKeepsTheRoutersF32) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  const std::string out = testing::cli_temp_path("stories-moe-q8_0.gguf");
  CliResult c = run_cli("convert " + moe + " -o " + out + " --type q8_0");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("30 converted to q8_0"), std::string::npos) << c.err;
  CliResult info = run_cli("info " + out);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("blk.0.ffn_gate_exps.weight           q8_0"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("blk.3.ffn_down_exps.weight           q8_0"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("blk.0.ffn_gate_inp.weight            f32"), std::string::npos) << info.out;
  EXPECT_LT(std::filesystem::file_size(out), std::filesystem::file_size(moe) * 6 / 10);
  const std::string run = " -p 'Once upon a time' -n 24 --temp 0 --json";
  CliResult a = run_cli("run -m " + out + run), b = run_cli("run -m " + moe + run);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["tokens"], nlohmann::json::parse(b.out)["tokens"]);
  std::remove(out.c_str());
}

TEST(Cli, InfoNamesThePreTokenizerAndTheChatTemplateWithItsToolCallFormat) {
  SKIP_UNLESS_EXISTS(model_path("vocab/ggml-vocab-gpt-2.gguf"));
  CliResult r = run_cli("info --no-tensors " + model_path("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tokenizer: gpt2 (byte-level BPE), pre-tokenizer 'gpt-2', 50257 tokens"), std::string::npos)
      << r.out;
  // An HF folder whose tokenizer_config.json carries a Hermes-style template.
  SKIP_UNLESS_EXISTS(model_path("stories260K/hf/config.json"));
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "cli_info_template_hf";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(model_path(std::string("stories260K/hf/") + f), dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": )"
      << R"("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %})"
      << R"({% if tools %}<tools>{{ tools | tojson }}</tools> Answer with <tool_call></tool_call>{% endif %}"})";
  CliResult i = run_cli("info --no-tensors " + dir.string());
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("chat template: tokenizer.chat_template, "), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("tool calls: hermes"), std::string::npos) << i.out;
}

TEST(Cli, ConvertLlama2cThenRun) {
  SKIP_UNLESS_EXISTS(model_path("stories260K/stories260K.bin"));
  const std::string out = ::testing::TempDir() + "/cli_llama2c.gguf";
  CliResult c = run_cli("convert " + model_path("stories260K/stories260K.bin") + " --tokenizer " +
                     model_path("stories260K/tok512.bin") + " -o " + out);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  CliResult r = run_cli("run -m " + out + " -n 16 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ref = reference();
  auto all = ref["generation"][0]["tokens"].get<std::vector<int32_t>>();
  std::vector<int32_t> expected(all.begin() + 1, all.begin() + 17);
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
}

TEST(Cli, SynthWritesALoadableModel) {
  const std::string out = ::testing::TempDir() + "/cli_synth_tiny.gguf";
  CliResult s = run_cli("synth --preset tiny --type q4_0 --layers 1 -o " + out);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  CliResult r = run_cli("run -m " + out + " -p 'hello world' -n 8 --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 8u);
  // Deterministic for a seed: the same command writes the same bytes.
  const std::string out2 = ::testing::TempDir() + "/cli_synth_tiny2.gguf";
  ASSERT_EQ(run_cli("synth --preset tiny --type q4_0 --layers 1 -t 1 -o " + out2).exit_code, 0);
  std::ifstream f1(out, std::ios::binary), f2(out2, std::ios::binary);
  std::string b1((std::istreambuf_iterator<char>(f1)), {}), b2((std::istreambuf_iterator<char>(f2)), {});
  EXPECT_EQ(b1, b2);
}

// --sliding-window writes {arch}.attention.sliding_window; `info` names it and
// `run` generates with the window.
TEST(Cli, SynthSlidingWindowOverride) {
  const std::string out = ::testing::TempDir() + "/cli_synth_window.gguf";
  CliResult s = run_cli("synth --preset tiny-mistral --sliding-window 24 --type q8_0 --layers 1 -o " + out);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  CliResult info = run_cli("info " + out);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("sliding window 24"), std::string::npos) << info.out;
  CliResult r = run_cli("run -m " + out + " -p 'hello world' -n 40 --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].size(), 40u);
  CliResult bad = run_cli("synth --preset tiny --sliding-window -3 -o " + ::testing::TempDir() + "/never_w.gguf");
  EXPECT_NE(bad.exit_code, 0);
}

// --experts and --expert-ffn reshape an MoE preset (how a model near the
// per-expert series cap is made small); a dense preset refuses them.
TEST(Cli, SynthExpertOverrides) {
  const std::string out = ::testing::TempDir() + "/cli_synth_experts.gguf";
  CliResult s = run_cli("synth --preset tiny-qwen3moe --experts 40 --expert-ffn 64 --layers 2 --vocab 512 --type q8_0 -o " + out);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  CliResult info = run_cli("info " + out);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("mixture of experts (4 of 40"), std::string::npos) << info.out;
  CliResult r = run_cli("run -m " + out + " -p 'hello world' -n 4 --seed 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CliResult dense = run_cli("synth --preset tiny --experts 8 -o " + ::testing::TempDir() + "/never_e.gguf");
  EXPECT_NE(dense.exit_code, 0);
  EXPECT_NE(dense.err.find("need an MoE preset"), std::string::npos) << dense.err;
}

// `plan --measure --rounds`: the model loaded once, then per round a calibration
// and the decode, prefill and streamed measurements; the JSON holds the medians
// and every round. 1 MB budget: just above stories260K's smallest workable one
// (913408 bytes), so every layer streams. Takes a few seconds (a calibration per
// round).
TEST(Cli, PlanMeasureRoundsJson) {
  CliResult r = run_cli("plan --measure " + kStories +
                        " --rounds 2 --json -t 1 --measure-decode 4 --measure-prompt 8 --budget-gb 0.001");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_rounds"], 2);
  ASSERT_EQ(j["rounds"].size(), 2u);
  for (const auto& round : j["rounds"]) {
    EXPECT_GT(round["calibration"]["weight_read_gbps"].get<double>(), 0);
    EXPECT_GT(round["calibration"]["matmul_tflops"].get<double>(), 0);
    EXPECT_GT(round["calibration"]["disk_read_gbps"].get<double>(), 0);
  }
  for (const char* k : {"decode", "prefill", "stream"}) {
    EXPECT_GT(j[k]["predicted_tokens_per_s"].get<double>(), 0) << k;
    EXPECT_GT(j[k]["measured_tokens_per_s"].get<double>(), 0) << k;
    const auto& rounds = j["rounds"];
    for (const auto& round : rounds) EXPECT_GT(round[k]["measured_tokens_per_s"].get<double>(), 0) << k;
    // The median of two rounds' own ratios is their mean.
    EXPECT_NEAR(j[k]["ratio"].get<double>(),
                0.5 * (rounds[0][k]["ratio"].get<double>() + rounds[1][k]["ratio"].get<double>()), 1e-9)
        << k;
    EXPECT_LE(j[k]["n_within_tolerance"].get<int>(), 2) << k;
  }
  // What the disk did during the timed streamed tokens, and the plan at that rate.
  EXPECT_GT(j["stream"]["at_run_disk"]["predicted_tokens_per_s"].get<double>(), 0);
  for (const auto& round : j["rounds"]) {
    const auto& s = round["stream"];
    EXPECT_GT(s["disk_bytes_per_token"].get<double>(), 0);
    EXPECT_GT(s["run_disk_gbps"].get<double>(), 0);
    EXPECT_GT(s["disk_busy_fraction"].get<double>(), 0);
    EXPECT_LE(s["disk_busy_fraction"].get<double>(), 1.0);
    EXPECT_EQ(s["at_run_disk"]["measured_tokens_per_s"], s["measured_tokens_per_s"]);
    // At the probe's own rate the two predictions would be one; the plan's step
    // is never shorter than its compute.
    const double at_run = s["at_run_disk"]["predicted_tokens_per_s"].get<double>();
    EXPECT_LE(at_run, 1.0 / s["predicted_compute_s"].get<double>() * (1 + 1e-9));
  }
}

// `plan kv` counts the window: Mistral 7B (window 4096 on every layer) keeps
// 4112 positions per sequence in blocks of 16, 4352 in blocks of 256; Gemma 2
// (global layers too) keeps every position, and the output says which.
TEST(Cli, PlanKvTakesTheWindowIntoAccount) {
  CliResult r = run_cli("plan kv -m mistral-7b --ctxs 4096,32768 --batch 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["contexts"][0]["kv_tokens_kept"], 4096);
  EXPECT_EQ(j["contexts"][1]["kv_tokens_kept"], 4112);
  EXPECT_DOUBLE_EQ(j["contexts"][1]["kv_bytes_per_seq"].get<double>(), 4112.0 * 131072);
  EXPECT_NE(j["kv_window_note"].get<std::string>().find("every layer"), std::string::npos) << r.out;
  r = run_cli("plan kv -m mistral-7b --ctxs 32768 --batch 1 --kv-block 256 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["contexts"][0]["kv_tokens_kept"], 4096 + 256);
  r = run_cli("plan kv -m gemma2-9b --ctxs 8192 --batch 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("window    sliding window 4096 on 21 of 42 layers: KV of every position kept"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("output tied to the embeddings"), std::string::npos) << r.out;
}

// `plan parallel --parallel ep`: the job's plan over ranks alike, from the
// model file, printed as rank 0 prints it at load. The shares cover the
// experts and hold the file's weights. With attention on rank 0 every routed
// layer crosses the link out and back, so 5 ms more latency adds 2 x 5 ms per
// routed layer to decode; with attention on every rank one exchange per
// routed layer and the step's description: 5 ms per routed layer and 5 ms.
TEST(Cli, PlanParallelPredictsExpertsOverRanks) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  auto plan = [&](const std::string& link_us, const std::string& attention = "rank0") {
    CliResult r = run_cli("plan parallel -m " + moe + " --parallel ep --ranks 2 --hw h100 --json --link-us " + link_us +
                          " --ep-attention " + attention);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  };
  const nlohmann::json near = plan("50"), far = plan("5050");
  const nlohmann::json near_every = plan("50", "every"), far_every = plan("5050", "every"), chosen = plan("50", "auto");
  ASSERT_FALSE(near_every.is_discarded() || far_every.is_discarded() || chosen.is_discarded());
  EXPECT_EQ(near["attention"]["placement"], "rank0");
  EXPECT_EQ(near_every["attention"]["placement"], "every");
  EXPECT_NEAR(far_every["predicted"]["decode_s"].get<double>() - near_every["predicted"]["decode_s"].get<double>(),
              (near_every["n_routed_layers"].get<double>() + 1) * 5e-3, 1e-9);
  // Ranks alike: one exchange beats a round trip, so auto takes every rank
  // and reports both predictions.
  EXPECT_EQ(chosen["attention"]["placement"], "every") << chosen.dump();
  EXPECT_DOUBLE_EQ(chosen["attention"]["decode_s"]["every"].get<double>(),
                   near_every["predicted"]["decode_s"].get<double>());
  EXPECT_DOUBLE_EQ(chosen["attention"]["decode_s"]["rank0"].get<double>(), near["predicted"]["decode_s"].get<double>());
  EXPECT_GT(chosen["attention"]["kv_bytes"].get<double>(), 0);
  ASSERT_FALSE(near.is_discarded());
  ASSERT_FALSE(far.is_discarded());
  const nlohmann::json& ranks = near["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0]["experts"][0], 0);
  EXPECT_EQ(ranks[0]["experts"][1], ranks[1]["experts"][0]);
  EXPECT_EQ(ranks[1]["experts"][1], near["n_expert"]);
  EXPECT_GT(ranks[1]["experts"][0].get<int64_t>(), 0);
  const double held = ranks[0]["weight_bytes"].get<double>() + ranks[1]["weight_bytes"].get<double>();
  const auto file = static_cast<double>(std::filesystem::file_size(moe));  // the weights and the header
  EXPECT_LT(held, file);
  EXPECT_GT(held, 0.95 * file);
  const double routed = near["n_routed_layers"].get<double>();
  EXPECT_GT(routed, 0);
  const nlohmann::json &a = near["predicted"], &b = far["predicted"];
  EXPECT_NEAR(b["decode_s"].get<double>() - a["decode_s"].get<double>(), routed * 2 * 5e-3, 1e-9);
  EXPECT_GT(a["decode_network_s"].get<double>(), 0);
  EXPECT_LT(a["decode_network_s"].get<double>(), a["decode_s"].get<double>());
  EXPECT_GT(a["prefill_s"].get<double>(), a["decode_s"].get<double>());
  const CliResult text = run_cli("plan parallel -m " + moe + " --parallel ep --ranks 2");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[sluice] experts over 2 ranks (ep)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ms of it on links"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[sluice] attention on "), std::string::npos) << text.out;
}

// `plan parallel --parallel pp,ep`: stages of --ep-size ranks, each stage a
// contiguous range of layers whose experts its ranks split; together the
// ranks hold the file's weights once.
TEST(Cli, PlanParallelPlansStagesOfExpertRanks) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  const CliResult r = run_cli("plan parallel -m " + moe + " --parallel pp,ep --ranks 4 --ep-size 2 --hw h100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 4u);
  double held = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const nlohmann::json& rank = j["ranks"][static_cast<size_t>(i)];
    EXPECT_EQ(rank["rank"], i);
    EXPECT_EQ(rank["stage"], i / 2);
    EXPECT_EQ(rank["experts"][0], i % 2 == 0 ? 0 : 8) << r.out;
    EXPECT_EQ(rank["experts"][1], i % 2 == 0 ? 8 : 16) << r.out;
    held += rank["weight_bytes"].get<double>();
  }
  EXPECT_EQ(j["ranks"][0]["layers"][0], 0);
  EXPECT_EQ(j["ranks"][1]["layers"], j["ranks"][0]["layers"]);
  EXPECT_EQ(j["ranks"][2]["layers"][0], j["ranks"][0]["layers"][1]);
  EXPECT_EQ(j["ranks"][3]["layers"], j["ranks"][2]["layers"]);
  EXPECT_EQ(j["ranks"][2]["layers"][1], 4);  // stories-moe's layers
  const auto file = static_cast<double>(std::filesystem::file_size(moe));
  EXPECT_LT(held, file);
  EXPECT_GT(held, 0.95 * file);
  EXPECT_GT(j["predicted"]["decode_network_s"].get<double>(), 0);
  EXPECT_LT(j["predicted"]["decode_network_s"].get<double>(), j["predicted"]["decode_s"].get<double>());
  const CliResult text = run_cli("plan parallel -m " + moe + " --parallel pp,ep --ranks 4 --ep-size 2");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("[sluice] pipeline of 2 stages x 2 ranks (pp,ep)"), std::string::npos) << text.out;
}

// `plan parallel --parallel pp`: contiguous layer ranges over the ranks; what
// a job would refuse, it refuses with the job's words.
TEST(Cli, PlanParallelCutsLayersAndRefusesAsTheJobWould) {
  CliResult r = run_cli("plan parallel -m " + kStories + " --parallel pp --ranks 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 3u);
  int64_t next = 0;
  for (const nlohmann::json& rank : j["ranks"]) {
    EXPECT_EQ(rank["layers"][0], next) << r.out;
    EXPECT_GT(rank["layers"][1].get<int64_t>(), next) << r.out;
    next = rank["layers"][1].get<int64_t>();
  }
  EXPECT_EQ(next, 5);  // stories260K's layers
  EXPECT_GE(j["predicted"]["micro_batches"].get<int64_t>(), 1);
  // One prompt, cut at the best count of micro-batches (the pipeline cuts it in pieces).
  EXPECT_GT(j["predicted"]["prefill_s"].get<double>(), 0);
  const CliResult text = run_cli("plan parallel -m " + kStories + " --parallel pp --ranks 2");
  EXPECT_NE(text.out.find("in " + std::to_string(j["predicted"]["micro_batches"].get<int64_t>()) + " micro-batches"),
            std::string::npos) << text.out;
  const std::pair<std::string, std::string> refused[] = {
      {"--parallel ep --ranks 2", "--parallel ep needs a mixture-of-experts model"},
      {"--parallel pp,ep --ranks 2", "--parallel pp,ep needs --ep-size E"},
      {"--parallel pp,ep --ranks 4 --ep-size 2", "--parallel pp,ep needs a mixture-of-experts model"},
      {"--parallel pp,ep --ranks 3 --ep-size 2", "3 ranks cannot be pipeline stages of --ep-size 2 ranks each"},
      {"--parallel pp --ranks 2 --ep-size 2", "--ep-size applies to --parallel pp,ep only"},
      {"--parallel pp,ep --ranks 12 --ep-size 2", "6 stages (12 ranks / --ep-size 2) for 5 layers"},
      {"--parallel tp --ranks 2", "unknown --parallel mode 'tp'"},
      {"--parallel pp --ranks 2 --budget-gb 0.0001", "cannot be cut into 2 ranges that fit"},
      {"--parallel pp --ranks 0", "--ranks must be >= 1"},
      {"--parallel pp --link-gbps 0", "--link-gbps > 0"}};
  for (const auto& [flags, why] : refused) {
    r = run_cli("plan parallel -m " + kStories + " " + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.err.find(why), std::string::npos) << flags << ": " << r.err;
  }
}

// `plan parallel --parallel pp` under a budget below a rank's range: the rank
// streams the rest from its disk; the map and the JSON say which layers, and
// the prediction has a disk leg.
TEST(Cli, PlanParallelStreamsARangeBeyondItsBudget) {
  const std::string flags = " --parallel pp --ranks 2 --hw h100 --budget-gb 0.0005 --disk-gbps 2";
  CliResult r = run_cli("plan parallel -m " + kStories + flags + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 2u);
  int streaming = 0;
  for (const nlohmann::json& rank : j["ranks"]) {
    if (rank["streamed_layers"].empty()) continue;
    ++streaming;
    EXPECT_GE(rank["ring_slots"].get<int64_t>(), 2) << r.out;
    EXPECT_GT(rank["range_bytes"].get<uint64_t>(), 500'000u) << r.out;  // beyond the budget
    EXPECT_LE(rank["weight_bytes"].get<uint64_t>(), 500'000u) << r.out;
    for (const nlohmann::json& l : rank["streamed_layers"]) {
      EXPECT_GE(l.get<int64_t>(), rank["layers"][0].get<int64_t>());
      EXPECT_LT(l.get<int64_t>(), rank["layers"][1].get<int64_t>());
    }
  }
  EXPECT_GE(streaming, 1) << r.out;
  EXPECT_GT(j["predicted"]["decode_disk_s"].get<double>(), 0) << r.out;
  r = run_cli("plan parallel -m " + kStories + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("+disk"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(R resident, S streamed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ms waiting on disks"), std::string::npos) << r.out;
}

TEST(Cli, PlanMeasureRejectsBadRounds) {
  for (const char* n : {"0", "-2", "101"}) {
    // Checked before the model is opened: the path does not matter.
    CliResult r = run_cli(std::string("plan --measure /nonexistent/model.gguf --rounds ") + n);
    EXPECT_EQ(r.exit_code, 1) << n;
    EXPECT_NE(r.err.find("--rounds must be between 1 and"), std::string::npos) << n << ": " << r.err;
  }
  CliResult alone = run_cli("plan --rounds 2 spec");
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.err.find("--rounds goes with --measure"), std::string::npos) << alone.err;
}

TEST(Cli, BadInputFailsCleanly) {
  CliResult missing = run_cli("run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("error:"), std::string::npos);

  const std::string junk = ::testing::TempDir() + "/junk.gguf";
  std::ofstream(junk) << "GGUF\x03\x00\x00\x00 this is not a model";
  CliResult bad = run_cli("run -m " + junk + " -p hi");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("error:"), std::string::npos) << bad.err;

  CliResult preset = run_cli("synth --preset 3t -o " + ::testing::TempDir() + "/never.gguf");
  EXPECT_EQ(preset.exit_code, 1);
  EXPECT_NE(preset.err.find("unknown synth preset"), std::string::npos);

  CliResult temp = run_cli("run -m " + kStories + " -p hi --min-p 2");
  EXPECT_EQ(temp.exit_code, 1);
  EXPECT_NE(temp.err.find("min_p"), std::string::npos) << temp.err;
}

}  // namespace
}  // namespace sluice
