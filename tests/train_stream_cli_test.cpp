// The README's fine-tuning over a streamed base, end to end through the CLI:
// `finetune --mem-budget ... --json` reports the planned and the measured
// steps, `plan train` the same placement per micro-batch size with the
// crossover, and bad requests fail cleanly. --disk-rate-cap: the streamed
// run's reads no faster than the cap, plan train planning for that disk.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::run_cli;

const std::string kStories = std::string(SLUICE_SOURCE_DIR) + "/tests/data/finetune/stories.txt";

// An 8-layer model at the tiny preset's layer shape, Q8_0, 512-token
// vocabulary: 7.0 MB, a third of which holds the essentials and two slots.
const std::string& base() {
  static const ::sluice::testing::ProcessTempFile file("train_stream_cli_base.gguf");
  static const bool written = [] {
    CliResult s = run_cli("synth --preset tiny --layers 8 --vocab 512 --type q8_0 --seed 3 -o " + file.path());
    EXPECT_EQ(s.exit_code, 0) << s.err;
    return s.exit_code == 0;
  }();
  (void)written;
  return file.path();
}

TEST(TrainStreamCli, FinetuneUnderABudgetReportsPlannedAndMeasuredSteps) {
  const std::string out = ::sluice::testing::cli_temp_path("train_stream_cli_adapter.gguf");
  CliResult r = run_cli("finetune -m " + base() + " -d " + kStories + " -o " + out +
                        " --steps 3 --batch 2 --seq 16 --rank 4 --val-split 0 --backend reference -t 2"
                        " --mem-budget 2.4M --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("order: training"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("predicted against measured"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 3);
  EXPECT_EQ(j["timed_steps"], 2);
  ASSERT_TRUE(j["streamed"].get<bool>());
  const nlohmann::json& s = j["stream"];
  EXPECT_EQ(s["micro_batches"], 1);
  const double predicted = s["predicted_read_bytes"], measured = s["measured_read_bytes"];
  EXPECT_GT(predicted, 0.0);
  EXPECT_LE(measured, predicted);
  EXPECT_GE(measured, 0.99 * predicted);
  EXPECT_GE(s["predicted_step_s"].get<double>(), s["predicted_compute_s"].get<double>());
  std::filesystem::remove(out);
}

// A disk capped at 40 MB/s: the placement map says so, and the steps' reads,
// bytes over the time they were in flight, went no faster.
TEST(TrainStreamCli, FinetuneWithTheDiskCappedReadsNoFasterThanTheCap) {
  const std::string out = ::sluice::testing::cli_temp_path("train_stream_cli_capped.gguf");
  CliResult r = run_cli("finetune -m " + base() + " -d " + kStories + " -o " + out +
                        " --steps 3 --batch 2 --seq 16 --rank 4 --val-split 0 --backend reference -t 2"
                        " --mem-budget 2.4M --disk-rate-cap 40M/s --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("reads capped at 40 MB/s"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double gbps = j["stream"]["run_disk_gbps"];
  EXPECT_GT(gbps, 0.0);
  EXPECT_LE(gbps, 0.04 * 1.02);
  std::filesystem::remove(out);
  // Nothing streams without a budget: refused. A rate that is not one: refused.
  CliResult no_budget = run_cli("finetune -m " + base() + " -d " + kStories + " -o " + out +
                                " --steps 1 --seq 16 --backend reference --disk-rate-cap 40M");
  EXPECT_EQ(no_budget.exit_code, 1);
  EXPECT_NE(no_budget.err.find("--mem-budget"), std::string::npos) << no_budget.err;
  CliResult bad = run_cli("finetune -m " + base() + " -d " + kStories + " -o " + out +
                          " --mem-budget 2.4M --disk-rate-cap fast");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--disk-rate-cap"), std::string::npos) << bad.err;
}

TEST(TrainStreamCli, PlanTrainGivesThePlacementPerMicroBatchAndTheCrossover) {
  CliResult r = run_cli("plan train -m " + base() +
                        " --budget-fraction 0.34 --tflops 0.002 --disk-gbps 0.1 --tokens 4,64,1024 --seq 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 3u);
  const nlohmann::json& few = j["rows"][0];
  const nlohmann::json& many = j["rows"][2];
  // The reads do not depend on the tokens; compute does: the overhead falls.
  EXPECT_EQ(few["layer_reads"], many["layer_reads"]);
  EXPECT_GT(few["layer_reads"].get<int>(), 0);
  EXPECT_EQ(few["layer_reads"], 2 * (few["n_streamed"].get<int>() - few["n_ring_slots"].get<int>()));
  EXPECT_GT(few["overhead"].get<double>(), many["overhead"].get<double>());
  EXPECT_EQ(few["bound"], "disk");
  EXPECT_NEAR(many["compute_s"].get<double>() / few["compute_s"].get<double>(), 256, 256 * 0.05);
  // Below the crossover the step is the reads and the turns; past it, compute.
  const double five = j["tokens_overhead_5pct"];
  EXPECT_GT(five, 4.0);
  EXPECT_LT(five, 1024.0);
  EXPECT_EQ(many["bound"], "compute");
  EXPECT_EQ(j["layers"].get<std::string>().front(), 'S');
  EXPECT_EQ(j["layers"].get<std::string>().back(), 'S');
  // finetune --disk-rate-cap's disk: the smaller rate, a later crossover
  // (the reads take 10x as long; compute and the turns are the same).
  CliResult capped = run_cli("plan train -m " + base() +
                             " --budget-fraction 0.34 --tflops 0.002 --disk-gbps 0.1 --tokens 4,64,1024 --seq 16"
                             " --disk-rate-cap 10M --json");
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  const nlohmann::json c = nlohmann::json::parse(capped.out);
  EXPECT_DOUBLE_EQ(c["disk_gbps"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ(c["disk_rate_cap_bytes_per_s"].get<double>(), 10e6);
  EXPECT_GT(c["tokens_overhead_5pct"].get<double>(), 5 * five);
  // A cap above the disk's rate changes nothing.
  CliResult loose = run_cli("plan train -m " + base() +
                            " --budget-fraction 0.34 --tflops 0.002 --disk-gbps 0.1 --tokens 4,64,1024 --seq 16"
                            " --disk-rate-cap 1G --json");
  ASSERT_EQ(loose.exit_code, 0) << loose.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(loose.out)["tokens_overhead_5pct"].get<double>(), five);
  // The text form names the crossover.
  CliResult t = run_cli("plan train -m " + base() + " --budget-gb 0.0024 --tflops 0.002 --disk-gbps 0.1 --seq 16");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("crossover"), std::string::npos) << t.out;
}

// --recompute off plans finetune --recompute off: the same forward visit, a
// backward without the rerun, the intermediates' memory per micro-batch (one
// set a layer but the last, growing with the tokens), so less compute a token
// and a later crossover. finetune under --mem-budget plans its step the same
// way: a backward visit shorter against its forward with off (a ratio: each
// run measures its own compute rate), the adapter the same.
TEST(TrainStreamCli, PlanTrainWithKeptActivations) {
  const std::string args = " --budget-fraction 0.34 --tflops 0.002 --disk-gbps 0.1 --tokens 64,1024 --seq 16 --json";
  CliResult on = run_cli("plan train -m " + base() + args);
  CliResult off = run_cli("plan train -m " + base() + args + " --recompute off");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  ASSERT_EQ(off.exit_code, 0) << off.err;
  const nlohmann::json a = nlohmann::json::parse(on.out), b = nlohmann::json::parse(off.out);
  EXPECT_EQ(a["recompute"], "on");
  EXPECT_EQ(b["recompute"], "off");
  for (size_t i = 0; i < 2; ++i) {
    const nlohmann::json &x = a["rows"][i], &y = b["rows"][i];
    EXPECT_DOUBLE_EQ(x["forward_s"].get<double>(), y["forward_s"].get<double>());
    EXPECT_LT(y["backward_s"].get<double>(), 0.8 * x["backward_s"].get<double>());
    EXPECT_LT(y["compute_s"].get<double>(), x["compute_s"].get<double>());
    EXPECT_EQ(x["kept_activation_bytes"].get<double>(), 0.0);
    EXPECT_GT(y["kept_activation_bytes"].get<double>(), 0.0);
  }
  EXPECT_NEAR(b["rows"][1]["kept_activation_bytes"].get<double>() / b["rows"][0]["kept_activation_bytes"].get<double>(),
              16.0, 16 * 0.1);
  EXPECT_GT(b["tokens_overhead_5pct"].get<double>(), a["tokens_overhead_5pct"].get<double>());
  CliResult text = run_cli("plan train -m " + base() +
                           " --budget-fraction 0.34 --tflops 0.002 --disk-gbps 0.1 --seq 16 --recompute off");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("intermediates kept (--recompute off)"), std::string::npos) << text.out;
  CliResult bad = run_cli("plan train -m " + base() + " --budget-fraction 0.34 --tflops 1 --disk-gbps 1 --recompute x");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--recompute"), std::string::npos) << bad.err;

  nlohmann::json step[2];
  std::string adapter[2];
  for (int k = 0; k < 2; ++k) {
    const std::string dir = ::sluice::testing::cli_temp_path(k ? "train_stream_kept" : "train_stream_rerun");
    std::filesystem::create_directories(dir);
    CliResult r = run_cli("finetune -m " + base() + " -d " + kStories + " -o " + dir + "/adapter.gguf" +
                          " --steps 2 --batch 2 --seq 16 --rank 4 --val-split 0 --backend reference -t 2"
                          " --mem-budget 2.4M --json --recompute " + (k ? "off" : "on"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(k ? "activations: kept" : "activations: recomputed"), std::string::npos) << r.err;
    step[k] = nlohmann::json::parse(r.out)["stream"];
    std::ifstream in(dir + "/adapter.gguf", std::ios::binary);
    adapter[k].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::filesystem::remove_all(dir);
  }
  auto backward_per_forward = [](const nlohmann::json& s) {
    return s["predicted_layer_backward_s"].get<double>() / s["predicted_layer_forward_s"].get<double>();
  };
  EXPECT_GT(backward_per_forward(step[0]), 1.5);
  EXPECT_LT(backward_per_forward(step[1]), 0.8 * backward_per_forward(step[0]));
  ASSERT_FALSE(adapter[0].empty());
  EXPECT_EQ(adapter[0], adapter[1]);
}

// A routed model (stories-moe, 4 routed layers of 16 experts) keeps its
// layers and reads its experts one by one: each micro-batch reads both visits'
// missed experts, more with more tokens until a visit chooses them all. With
// half the file the pool cannot hold two layers' choices, so every read
// stalls: the overhead falls as compute grows but is never nil, and the 5%
// crossover is searched plan by plan (the plan at it is under 5%, the one a
// token before over). With 90% it can: both passes' reads, read a layer ahead,
// hide behind their compute from some number of tokens on.
TEST(TrainStreamCli, PlanTrainOnARoutedModelSearchesTheCrossover) {
  const std::string moe = std::string(SLUICE_SOURCE_DIR) + "/models/stories-moe-f16.gguf";
  const std::string rates = " --budget-fraction 0.5 --tflops 0.05 --disk-gbps 0.5 --seq 64 --json";
  CliResult r = run_cli("plan train -m " + moe + rates + " --tokens 8,256,4096");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["n_expert_slots"].get<int>(), 16);
  EXPECT_EQ(j["layers"], "RRRR");
  ASSERT_EQ(j["rows"].size(), 3u);
  const nlohmann::json& few = j["rows"][0];
  const nlohmann::json& more = j["rows"][1];
  const nlohmann::json& many = j["rows"][2];
  EXPECT_EQ(few["layer_reads"], 0);
  EXPECT_GT(few["read_bytes"].get<double>(), 0);
  EXPECT_LT(few["read_bytes"].get<double>(), more["read_bytes"].get<double>());
  // Every expert chosen at each visit, near enough.
  EXPECT_NEAR(more["read_bytes"].get<double>(), many["read_bytes"].get<double>(), 1e-6 * many["read_bytes"].get<double>());
  EXPECT_GT(few["overhead"].get<double>(), more["overhead"].get<double>());
  EXPECT_GT(more["overhead"].get<double>(), many["overhead"].get<double>());
  EXPECT_GT(many["overhead"].get<double>(), 0.0);
  EXPECT_TRUE(j["tokens_no_overhead"].is_null());
  const auto five = static_cast<int64_t>(j["tokens_overhead_5pct"].get<double>());
  ASSERT_GT(five, 256);
  CliResult at = run_cli("plan train -m " + moe + rates + " --tokens " + std::to_string(five - 1) + "," +
                         std::to_string(five));
  ASSERT_EQ(at.exit_code, 0) << at.err;
  const nlohmann::json k = nlohmann::json::parse(at.out);
  EXPECT_GT(k["rows"][0]["overhead"].get<double>(), 0.05);
  EXPECT_LE(k["rows"][1]["overhead"].get<double>(), 0.05);
  CliResult text = run_cli("plan train -m " + moe + " --budget-fraction 0.5 --tflops 0.05 --disk-gbps 0.5 --seq 64");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("read one by one into a pool of"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("transfers wholly hidden never"), std::string::npos) << text.out;

  CliResult roomy = run_cli("plan train -m " + moe + " --budget-fraction 0.9 --tflops 0.05 --disk-gbps 0.5 --seq 64" +
                            " --tokens 8,4096 --json");
  ASSERT_EQ(roomy.exit_code, 0) << roomy.err;
  const nlohmann::json g = nlohmann::json::parse(roomy.out);
  EXPECT_GT(g["rows"][0]["overhead"].get<double>(), 0.05);  // 8 tokens compute too little to hide a read
  EXPECT_EQ(g["rows"][1]["overhead"].get<double>(), 0.0);
  ASSERT_FALSE(g["tokens_no_overhead"].is_null());
  EXPECT_GT(g["tokens_no_overhead"].get<double>(), 8);
  EXPECT_LE(g["tokens_no_overhead"].get<double>(), 4096);
}

TEST(TrainStreamCli, BadRequestsFailCleanly) {
  // No budget, both budgets, no rates, not a GGUF, a budget too small.
  for (const char* args :
       {" --tflops 1 --disk-gbps 1", " --budget-gb 1 --budget-fraction 0.3 --tflops 1 --disk-gbps 1",
        " --budget-fraction 0.3", " --budget-fraction 0.3 --tflops 1 --disk-gbps 1 --tokens 0"}) {
    CliResult r = run_cli("plan train -m " + base() + std::string(args));
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << args << ": " << r.err;
  }
  CliResult folder = run_cli("plan train -m " + ::testing::TempDir() + " --budget-gb 1 --tflops 1 --disk-gbps 1");
  EXPECT_EQ(folder.exit_code, 1);
  CliResult small = run_cli("plan train -m " + base() + " --budget-fraction 0.05 --tflops 1 --disk-gbps 1");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("smallest budget"), std::string::npos) << small.err;
}

}  // namespace
}  // namespace sluice
