// End-to-end tests of `sluice bench`: the JSON it prints has every documented
// key, positive figures that agree with each other, and bad arguments fail
// cleanly. Speed itself is never asserted (it depends on the machine).
#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::cli_temp_path;
using ::sluice::testing::run_cli;



class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new std::string(cli_temp_path("tiny_q8_0.gguf"));
    const CliResult s = run_cli("synth --preset tiny --type q8_0 --layers 1 -o " + *model_);
    ASSERT_EQ(s.exit_code, 0) << s.err;
  }
  static void TearDownTestSuite() {
    std::remove(model_->c_str());
    delete model_;
    model_ = nullptr;
  }
  static std::string* model_;
};
std::string* BenchCli::model_ = nullptr;

void expect_close(double a, double b, const char* what) {
  EXPECT_NEAR(a, b, 1e-9 * std::max(std::fabs(a), std::fabs(b))) << what;
}

TEST_F(BenchCli, JsonHasConsistentFigures) {
  const CliResult r = run_cli("bench -m " + *model_ + " -p 16 -n 8 -r 2 -t 1 --json --no-probe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // exactly one object
  for (const char* key : {"model", "n_threads", "pp_tokens", "tg_tokens", "reps", "pp_tps", "tg_tps", "pp_tps_all",
                          "tg_tps_all", "bytes_per_token", "achieved_gbps", "machine_read_gbps",
                          "machine_matmul_gflops", "bw_fraction", "isa", "weight_bytes", "pp_gflops"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["model"], *model_);
  EXPECT_EQ(j["n_threads"], 1);
  EXPECT_EQ(j["pp_tokens"], 16);
  EXPECT_EQ(j["tg_tokens"], 8);
  EXPECT_EQ(j["reps"], 2);
  EXPECT_FALSE(j["isa"].get<std::string>().empty());

  // Every repetition is reported and the medians lie within them.
  for (const char* test : {"pp", "tg"}) {
    const auto all = j[std::string(test) + "_tps_all"].get<std::vector<double>>();
    ASSERT_EQ(all.size(), 2u) << test;
    for (double v : all) EXPECT_GT(v, 0) << test;
    const double median = j[std::string(test) + "_tps"].get<double>();
    EXPECT_GE(median, *std::min_element(all.begin(), all.end())) << test;
    EXPECT_LE(median, *std::max_element(all.begin(), all.end())) << test;
  }

  // Bytes per token: the weights plus the f32 KV rows at the mean context (8 + 1) / 2.
  const double weight_bytes = j["weight_bytes"].get<double>();
  const double bytes_per_token = j["bytes_per_token"].get<double>();
  EXPECT_GT(weight_bytes, 0);
  const double kv = 2.0 * 1 /*layer*/ * 128 /*4 KV heads x 32*/ * sizeof(float) * 4.5;
  expect_close(bytes_per_token, weight_bytes + kv, "bytes_per_token");
  expect_close(j["achieved_gbps"].get<double>(), bytes_per_token * j["tg_tps"].get<double>() / 1e9, "achieved_gbps");
  EXPECT_GT(j["pp_gflops"].get<double>(), 0);

  // --no-probe: no machine figures, so no fractions.
  EXPECT_TRUE(j["machine_read_gbps"].is_null());
  EXPECT_TRUE(j["machine_matmul_gflops"].is_null());
  EXPECT_TRUE(j["bw_fraction"].is_null());
}

TEST_F(BenchCli, ProbesGiveFractions) {
  const CliResult r = run_cli("bench -m " + *model_ + " -p 8 -n 4 -r 1 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const double gbps = j["machine_read_gbps"].get<double>();
  const double gflops = j["machine_matmul_gflops"].get<double>();
  EXPECT_GT(gbps, 0);
  EXPECT_GT(gflops, 0);
  expect_close(j["bw_fraction"].get<double>(), j["achieved_gbps"].get<double>() / gbps, "bw_fraction");
  expect_close(j["flops_fraction"].get<double>(), j["pp_gflops"].get<double>() / gflops, "flops_fraction");
}

TEST_F(BenchCli, TableNamesBothTests) {
  const CliResult r = run_cli("bench -m " + *model_ + " -p 8 -n 4 -r 1 -t 1 --no-probe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" pp8 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tg4 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB/s"), std::string::npos) << r.out;
}

// --op-times on one backend: each test's operators, in the forward pass's
// order, with calls and work that follow from the model's shape, times whose
// sum lies within the pass's wall time, and a table.
void expect_op_times(const std::string& model, const std::string& backend) {
  const std::string args = "bench -m " + model + " -p 16 -n 4 -r 2 -t 1 --no-probe --op-times --backend " + backend;
  const CliResult r = run_cli(args + " --json");
  if (backend != "cpu" && r.exit_code != 0) GTEST_SKIP() << "no " << backend << " here: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& [test, steps] : {std::pair<std::string, int>{"pp", 1}, {"tg", 4}}) {
    SCOPED_TRACE(backend + " " + test);
    const nlohmann::json& t = j["op_times"][test];
    std::vector<std::string> ops;
    double sum = 0;
    std::map<std::string, nlohmann::json> by_op;
    for (const nlohmann::json& o : t["ops"]) {
      ops.push_back(o["op"]);
      by_op[o["op"]] = o;
      EXPECT_GE(o["seconds"].get<double>(), 0) << o["op"];
      sum += o["seconds"].get<double>();
    }
    const std::vector<std::string> want = {"embed", "rope tables", "attn norm + q/k/v", "bias + rope + kv store",
                                           "attention", "attn output", "residual add", "ffn norm + gate/up",
                                           "ffn act + down", "output norm + logits"};
    EXPECT_EQ(ops, want);
    for (const std::string& op : want) EXPECT_EQ(by_op[op]["calls"], op == "residual add" ? 2 * steps : steps) << op;
    const double pass = t["pass_seconds"].get<double>();
    EXPECT_GT(sum, 0);
    EXPECT_LE(sum, 1.5 * pass);  // the ops' time lies within the pass (up to the passes' spread)
    // gate/up is two n_embd x n_ff matrices, down one: twice the FLOPs and bytes.
    const double tok = test == "pp" ? 16 : 4;
    EXPECT_DOUBLE_EQ(by_op["ffn norm + gate/up"]["flops"].get<double>(),
                     2 * by_op["ffn act + down"]["flops"].get<double>());
    EXPECT_DOUBLE_EQ(by_op["ffn norm + gate/up"]["bytes"].get<double>(),
                     2 * by_op["ffn act + down"]["bytes"].get<double>());
    EXPECT_GT(by_op["ffn act + down"]["flops"].get<double>(), 0);
    // Wo: 2 FLOPs a weight a token, and its Q8_0 bytes (34 for 32 weights) once a step.
    expect_close(by_op["attn output"]["flops"].get<double>() / tok,
                 2 * by_op["attn output"]["bytes"].get<double>() / steps * 32 / 34, "attn output");
    EXPECT_GT(by_op["attention"]["flops"].get<double>(), 0);
    EXPECT_EQ(by_op["embed"]["flops"].get<double>(), 0);
  }
  const CliResult table = run_cli(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("op times, pp16: median of 2 profiled passes"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("op times, tg4:"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("| attention "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("| sum of the ops "), std::string::npos) << table.out;
}

TEST_F(BenchCli, OpTimesOnTheCpu) { expect_op_times(*model_, "cpu"); }
TEST_F(BenchCli, OpTimesOnCudaOrSkips) { expect_op_times(*model_, "cuda"); }

// Under --mem-budget the layers stream from the file: each layer's wait for
// its weights is a row of its own, once a layer a step, before the layer's
// first operator.
TEST_F(BenchCli, OpTimesShowTheStreamedWeightsWait) {
  const std::string model = cli_temp_path("tiny6_q8_0.gguf");
  const CliResult s = run_cli("synth --preset tiny --type q8_0 --layers 6 -o " + model);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const CliResult r =
      run_cli("bench -m " + model + " -p 16 -n 4 -r 1 -t 1 --no-probe --op-times --mem-budget 4200K --json");
  std::remove(model.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& [test, steps] : {std::pair<std::string, int>{"pp", 1}, {"tg", 4}}) {
    const nlohmann::json& ops = j["op_times"][test]["ops"];
    ASSERT_GE(ops.size(), 4u) << test;
    EXPECT_EQ(ops[2]["op"], "weights wait") << test;
    EXPECT_EQ(ops[2]["calls"], 6 * steps) << test;
    EXPECT_EQ(ops[3]["op"], "attn norm + q/k/v") << test;
  }
}

TEST_F(BenchCli, BadArgumentsFailCleanly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench -m /nonexistent/model.gguf --no-probe", "error:"},
      {"bench -m " + *model_ + " -p 0 --no-probe", "-p must be > 0"},
      {"bench -m " + *model_ + " -n -1 --no-probe", "-n must be >= 0"},
      {"bench -m " + *model_ + " -p 2000 -n 100 --no-probe", "exceeds the model's context"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

}  // namespace
}  // namespace sluice
#include "cli_runner.h"
