// The README's fine-tuning example, end to end through the CLI on the CPU
// backend's training operators: `sluice finetune --backend cpu` on
// stories260K lowers the held-out loss, writes an adapter `sluice run --lora`
// takes and that changes the model's greedy text; a run stopped at a
// checkpoint and resumed writes the same adapter, byte for byte; a
// mixture-of-experts base trains as the README shows; data that tokenizes to
// nothing fails cleanly and writes nothing.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::cli_temp_path;
using ::sluice::testing::model_path;
using ::sluice::testing::run_cli;

const std::string kBase = model_path("stories260K/stories260K.gguf");
const std::string kData = std::string(SLUICE_SOURCE_DIR) + "/tests/data/finetune/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string finetune(const std::string& out, const std::string& extra, int seed = 1) {
  return "finetune -m " + kBase + " -d " + kData + "stories.txt --val-data " + kData + "stories-heldout.txt -o " +
         out + " --rank 4 --alpha 8 --batch 4 --seq 64 --lr 3e-3 --warmup 2 --seed " + std::to_string(seed) +
         " --backend cpu -t 2 " + extra;
}

std::vector<int32_t> greedy(const std::string& lora) {
  CliResult r = run_cli("run -m " + kBase + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos --json" +
                        (lora.empty() ? "" : " --lora " + lora));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["tokens"].get<std::vector<int32_t>>();
}

TEST(FinetuneCli, OnTheCpuBackendLowersTheHeldOutLossAndTheAdapterRuns) {
  SKIP_UNLESS_EXISTS(kBase);
  const std::string out = cli_temp_path("finetune_cpu.gguf");
  CliResult r = run_cli(finetune(out, "--steps 12 --eval-every 6 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("on cpu"), std::string::npos) << r.err;  // "cpu avx2", ...
  EXPECT_NE(r.err.find("held-out loss at step 6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 12/12"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 12);
  EXPECT_EQ(j["tokens_per_step"], 4 * 64);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_LT(j["heldout_after"].get<double>(), j["heldout_before"].get<double>() - 0.1) << r.err;
  EXPECT_LT(j["last_loss"].get<double>(), j["first_loss"].get<double>());
  ASSERT_TRUE(std::filesystem::exists(out));
  EXPECT_NE(greedy(out), greedy(""));
  std::filesystem::remove(out);
}

TEST(FinetuneCli, OnTheCpuBackendAResumedRunWritesTheSameAdapter) {
  SKIP_UNLESS_EXISTS(kBase);
  // The adapter is named after its file's stem: the same name in three folders.
  std::vector<std::string> dirs;
  for (const char* d : {"ft_straight/", "ft_stopped/", "ft_resumed/"}) {
    dirs.push_back(cli_temp_path(d));
    std::filesystem::create_directories(dirs.back());
  }
  const std::string straight = dirs[0] + "adapter.gguf";
  const std::string stopped = dirs[1] + "adapter.gguf";
  const std::string resumed = dirs[2] + "adapter.gguf";
  const std::string ckpt = dirs[1] + "step3.ckpt";
  CliResult a = run_cli(finetune(straight, "--steps 6"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // The checkpoint at step 3 of the same 6-step run (its schedule), then the rest.
  CliResult b = run_cli(finetune(stopped, "--steps 6 --checkpoint-every 3 --checkpoint " + ckpt));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  ASSERT_TRUE(std::filesystem::exists(ckpt)) << b.err;
  CliResult c = run_cli(finetune(resumed, "--steps 6 --resume " + ckpt));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("at step 3"), std::string::npos) << c.err;
  const std::string bytes = read_bytes(straight);
  ASSERT_GT(bytes.size(), 0u);
  EXPECT_TRUE(bytes == read_bytes(resumed)) << "the resumed run's adapter differs";
  EXPECT_TRUE(bytes == read_bytes(stopped));
  // Another seed is refused by name.
  CliResult other = run_cli(finetune(resumed, "--steps 6 --resume " + ckpt, /*seed=*/2));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("--seed"), std::string::npos) << other.err;
  for (const std::string& d : dirs) std::filesystem::remove_all(d);
}

// The README's mixture-of-experts example: stories-moe's attention adapted
// (its experts routed, frozen), the held-out loss down, and the adapter
// changes the greedy text.
// --recompute: keeping the activations (auto picks it for a small resident
// base) or rerunning each layer's forward writes the same adapter; the run
// says which it did, and a bad value is refused before any work.
TEST(FinetuneCli, KeptOrRecomputedActivationsWriteTheSameAdapter) {
  SKIP_UNLESS_EXISTS(kBase);
  std::string bytes[3];
  const char* modes[3] = {"on", "off", "auto"};
  const char* says[3] = {"activations: recomputed in the backward (--recompute on)",
                         "activations: kept", "activations: kept"};
  for (int i = 0; i < 3; ++i) {
    // One file name in three folders: the adapter is named after its file's stem.
    const std::string dir = cli_temp_path(std::string("finetune_recompute_") + modes[i]);
    std::filesystem::create_directories(dir);
    const std::string out = dir + "/adapter.gguf";
    CliResult r = run_cli(finetune(out, std::string("--steps 3 --recompute ") + modes[i]));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(says[i]), std::string::npos) << r.err;
    bytes[i] = read_bytes(out);
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(bytes[i].empty());
  }
  EXPECT_TRUE(bytes[0] == bytes[1]);
  EXPECT_TRUE(bytes[0] == bytes[2]);
  const std::string bad = cli_temp_path("finetune_recompute_bad.gguf");
  CliResult r = run_cli(finetune(bad, "--steps 3 --recompute sometimes"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--recompute"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(bad));
}

TEST(FinetuneCli, AMixtureOfExpertsBaseTrainsItsAttentionAndTheAdapterRuns) {
  const std::string moe = model_path("stories-moe/stories-moe.gguf");
  SKIP_UNLESS_EXISTS(moe);
  const std::string out = cli_temp_path("finetune_moe.gguf");
  CliResult r = run_cli("finetune -m " + moe + " -d " + kData + "stories.txt --val-data " + kData +
                        "stories-heldout.txt -o " + out + " --steps 30 --lr 3e-3 --seq 64 --batch 4 -t 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("(16 matrices, rank 8, alpha 16)"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["heldout_after"].get<double>(), j["heldout_before"].get<double>() - 0.3) << r.err;
  auto text = [&](const std::string& lora) {
    CliResult g = run_cli("run -m " + moe + " -p 'Once upon a time' -n 24 --temp 0 --ignore-eos --json" +
                          (lora.empty() ? "" : " --lora " + lora));
    EXPECT_EQ(g.exit_code, 0) << g.err;
    return nlohmann::json::parse(g.out.substr(0, g.out.find('\n')))["tokens"].get<std::vector<int32_t>>();
  };
  EXPECT_NE(text(out), text(""));
  std::filesystem::remove(out);
}

TEST(FinetuneCli, DataThatTokenizesToNothingFailsWithoutWritingAnAdapter) {
  SKIP_UNLESS_EXISTS(kBase);
  const std::string empty = cli_temp_path("finetune_empty.txt");
  const std::string out = cli_temp_path("finetune_empty.gguf");
  { std::ofstream(empty) << ""; }
  CliResult r = run_cli("finetune -m " + kBase + " -d " + empty + " -o " + out +
                        " --steps 2 --val-split 0 --backend cpu -t 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tokenizes to nothing"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace sluice
