// The CLI over three tiers on the GPU (--gpu-budget with --mem-budget): the
// same tokens as the whole model, dense and routed, and serving over them.
// Without a GPU every test skips with the reason.
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::run_cli;

// stories260K and its reference greedy continuation of "Once upon a time".
const std::string kTiersModel = testing::shipped_model_path("stories260K.gguf");

std::vector<int32_t> reference_continuation() {
  std::ifstream in(testing::stories260k_reference_path());
  const nlohmann::json ref = nlohmann::json::parse(in);
  const nlohmann::json& g = ref["generation"][1];
  const auto all = g["tokens"].get<std::vector<int32_t>>();
  return std::vector<int32_t>(all.begin() + static_cast<long>(g["prompt_tokens"].size()), all.end());
}

// Three tiers on the GPU: --gpu-budget holds the output head and the layers
// plan_tiers gives it, --mem-budget the store's essentials and ring, the rest
// read from the file; every layer not on the device is copied in at each use.
// The same tokens as the reference.
TEST(Cli, RunOnCudaOverThreeTiersGivesReferenceTokens) {
  const std::vector<int32_t> expected = reference_continuation();
  const std::string run =
      "run -m " + kTiersModel + " -p 'Once upon a time' -n " + std::to_string(expected.size()) + " --temp 0 --json ";
  CliResult probe = run_cli(run + "--backend cuda");
  if (probe.exit_code != 0) GTEST_SKIP() << "no GPU here: " << probe.err;
  CliResult r = run_cli(run + "--backend cuda --gpu-budget 900K --mem-budget 1000K");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("three tiers on the device: 1 layers"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layers: GSSSS"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"].get<std::vector<int32_t>>(), expected);
  // Serving over three tiers: the KV pool's share of --gpu-budget is kept
  // first and the weights' tiers planned in the rest.
  CliResult s = run_cli("bench-serve -m " + kTiersModel + " --backend cuda --gpu-budget 1200K --mem-budget 1000K "
                        "--requests 4 --prompt-len uniform:16:128 --output-len 8 --max-seqs 2 -c 256");
  EXPECT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.err.find("three tiers on the device"), std::string::npos) << s.err;
}

// A routed model over three tiers on the GPU: the device holds every layer's
// dense part and keeps the experts it copies in slots; the store streams the
// experts from the file under --mem-budget. The CPU's greedy tokens, and
// experts copied to the device as they land in the store's pool (the chosen
// ones and the next layer's predicted), so that some are found there ready.
TEST(Cli, RoutedModelOverThreeTiersOnCudaGivesTheCpusTokens) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  const std::string run = "run -m " + moe + " -p 'Once upon a time' -n 24 --temp 0 -t 2 --json ";
  CliResult probe = run_cli(run + "--backend cuda");
  if (probe.exit_code != 0) GTEST_SKIP() << "no GPU here: " << probe.err;
  CliResult cpu = run_cli(run + "--backend cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  CliResult tiers = run_cli(run + "--backend cuda --gpu-budget 1500K --mem-budget 1500000");
  ASSERT_EQ(tiers.exit_code, 0) << tiers.err;
  EXPECT_NE(tiers.err.find("three tiers on the device: 4 layers"), std::string::npos) << tiers.err;
  EXPECT_NE(tiers.err.find("device slots"), std::string::npos) << tiers.err;
  EXPECT_NE(tiers.err.find("found there"), std::string::npos) << tiers.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tiers.err, m, std::regex(R"((\d+) copied ahead of their use.*; (\d+) copied ahead in all)")))
      << tiers.err;
  EXPECT_GT(std::stoi(m[1].str()), 0) << tiers.err;
  EXPECT_GT(std::stoi(m[2].str()), 0) << tiers.err;
  EXPECT_EQ(nlohmann::json::parse(tiers.out)["tokens"], nlohmann::json::parse(cpu.out)["tokens"]);
}

}  // namespace
}  // namespace sluice
