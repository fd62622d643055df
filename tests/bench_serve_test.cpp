// End-to-end tests of `sluice bench-serve` on the real stories260K model: the JSON
// has every documented key, figures that agree with each other, a shared prefix
// shows up as prefix-cache hits, the dumped workload is what was asked for, and
// bad arguments fail cleanly. Speed itself is never asserted.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::cli_temp_path;
using ::sluice::testing::run_cli;

using testing::shipped_model_path;

// One row of a --timeline CSV.
struct ServeTimelineRow {
  double t = 0;
  long long running = 0, waiting = 0, used = 0, blocks = 0, demoted = 0, preempted = 0, done = 0;
};
bool parse_serve_timeline_row(const std::string& line, ServeTimelineRow* r) {
  return std::sscanf(line.c_str(), "%lf,%lld,%lld,%lld,%lld,%lld,%lld,%lld", &r->t, &r->running, &r->waiting, &r->used,
                     &r->blocks, &r->demoted, &r->preempted, &r->done) == 8;
}

class BenchServe : public ::testing::Test {
 protected:
  static std::string model() { return shipped_model_path("stories260K.gguf"); }
  static std::string common(const std::string& prompt_len = "uniform:4:40", const std::string& output_len = "16") {
    return "bench-serve -m " + model() + " -t 2 --requests 12 --seed 7 --prompt-len " + prompt_len + " --output-len " +
           output_len;
  }
};

TEST_F(BenchServe, JsonHasConsistentFigures) {
  const CliResult r = run_cli(common() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("KV"), std::string::npos) << "the engine summary goes to stderr: " << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);  // exactly one object
  for (const char* key :
       {"output_tps", "total_tps", "req_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s",
        "tpot_p99_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "kv_util_peak", "kv_util_mean", "prefix_hit_rate",
        "preemptions", "n_requests", "wall_s", "n_prompt_tokens", "n_output_tokens", "engine", "config"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["n_requests"], 12);
  EXPECT_EQ(j["n_output_tokens"], 12 * 16);
  EXPECT_EQ(j["config"]["requests"], 12);
  EXPECT_EQ(j["config"]["prompt_len"], "uniform:4:40");
  EXPECT_EQ(j["config"]["max_seqs"], 16);
  const int64_t n_prompt = j["n_prompt_tokens"];
  EXPECT_GE(n_prompt, 12 * 4);
  EXPECT_LE(n_prompt, 12 * 40);

  const double wall = j["wall_s"];
  ASSERT_GT(wall, 0);
  for (const char* key : {"output_tps", "total_tps", "req_per_s", "ttft_p50_s", "tpot_p50_s", "e2e_p50_s"}) {
    EXPECT_GT(j[key].get<double>(), 0) << key;
  }
  // Throughputs are token counts over the one wall time.
  EXPECT_NEAR(j["output_tps"].get<double>(), 12 * 16 / wall, 1e-9 * j["output_tps"].get<double>());
  EXPECT_NEAR(j["total_tps"].get<double>(), (12 * 16 + n_prompt) / wall, 1e-9 * j["total_tps"].get<double>());
  EXPECT_NEAR(j["req_per_s"].get<double>(), 12 / wall, 1e-9 * j["req_per_s"].get<double>());
  // Percentiles are ordered, and no request outlives the run.
  for (const char* m : {"ttft", "tpot", "e2e"}) {
    const std::string p = m;
    EXPECT_LE(j[p + "_p50_s"].get<double>(), j[p + "_p90_s"].get<double>()) << m;
    EXPECT_LE(j[p + "_p90_s"].get<double>(), j[p + "_p99_s"].get<double>()) << m;
  }
  EXPECT_LE(j["e2e_p99_s"].get<double>(), wall + 1e-6);
  EXPECT_LE(j["ttft_p50_s"].get<double>(), j["e2e_p50_s"].get<double>());
  // KV use: a fraction, the mean at most the peak. (A run this small can finish
  // between two samples, so the peak may be 0.)
  const double peak = j["kv_util_peak"], mean = j["kv_util_mean"];
  EXPECT_GE(j["kv_samples"].get<int64_t>(), 1);
  EXPECT_GE(mean, 0);
  EXPECT_LE(peak, 1);
  EXPECT_LE(mean, peak);
  EXPECT_GE(j["prefix_hit_rate"].get<double>(), 0);
  EXPECT_GE(j["preemptions"].get<int64_t>(), 0);
}

TEST_F(BenchServe, SharedPrefixHitsThePrefixCache) {
  const CliResult r = run_cli(common() + " --shared-prefix 48 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0);
  EXPECT_LE(j["prefix_hit_rate"].get<double>(), 1);
  EXPECT_GE(j["n_prompt_tokens"].get<int64_t>(), 12 * (48 + 4));
}

TEST_F(BenchServe, TableRunsWithPoissonArrivals) {
  const CliResult r = run_cli(common() + " --arrival poisson:200 --max-seqs 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"output", "tok/s", "TTFT", "TPOT", "E2E", "prefix cache"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " in\n" << r.out;
  }
}

// A ramp of arrivals (evenly spread over the given seconds) and the timeline
// of the engine's state over the run: CSV rows in time order whose counts end
// with every request finished, and the same run drawn as an SVG chart.
TEST_F(BenchServe, RampArrivalsAndTheTimeline) {
  const std::string workload = cli_temp_path("ramp.json"), csv = cli_temp_path("timeline.csv"),
                    svg = cli_temp_path("timeline.svg");
  const CliResult r = run_cli(common() + " --arrival ramp:0.3 --max-seqs 4 --sample-ms 1 --dump-workload " + workload +
                              " --timeline " + csv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream fw(workload);
  const nlohmann::json jw = nlohmann::json::parse(fw);
  ASSERT_EQ(jw.size(), 12u);
  for (size_t i = 0; i < jw.size(); ++i) EXPECT_NEAR(jw[i]["arrival_s"].get<double>(), 0.3 * i / 12, 1e-12) << i;
  std::ifstream fc(csv);
  std::string line;
  ASSERT_TRUE(std::getline(fc, line));
  EXPECT_EQ(line, "t_s,running,waiting,kv_blocks_used,kv_blocks_total,fluid_demoted_units,preemptions,finished");
  double last_t = -1;
  int64_t n_rows = 0, max_running = 0, finished = 0, total = 0;
  while (std::getline(fc, line)) {
    ServeTimelineRow r;
    ASSERT_TRUE(parse_serve_timeline_row(line, &r)) << line;
    EXPECT_GE(r.t, last_t);
    EXPECT_LE(r.used, r.blocks);
    EXPECT_LE(r.running, 4);
    EXPECT_EQ(r.demoted, 0);  // no fluid split
    last_t = r.t;
    max_running = std::max<int64_t>(max_running, r.running);
    finished = r.done;
    total = r.blocks;
    ++n_rows;
  }
  EXPECT_GE(n_rows, 2);
  EXPECT_GE(max_running, 1);
  EXPECT_EQ(finished, 12) << "the last row is the end of the run";
  EXPECT_GT(total, 0);
  ASSERT_EQ(run_cli(common() + " --arrival ramp:0.3 --timeline " + svg).exit_code, 0);
  std::ifstream fs(svg);
  const std::string chart(std::istreambuf_iterator<char>(fs), {});
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  EXPECT_NE(chart.find("arrival ramp:0.3"), std::string::npos) << "the title names the workload";
  for (const std::string& p : {workload, csv, svg}) std::remove(p.c_str());
}

// --concurrency 3: a closed loop of three clients. The engine could run 8,
// but never holds more than 3 requests (running or waiting), and every
// request still finishes with its tokens.
TEST_F(BenchServe, ConcurrencyKeepsThatManyRequestsInFlight) {
  const std::string csv = cli_temp_path("concurrency.csv");
  // 64 tokens a request: long enough a run for the 1 ms samples to see requests in flight.
  const CliResult r =
      run_cli(common("uniform:4:40", "64") + " --max-seqs 8 --concurrency 3 --sample-ms 1 --timeline " + csv + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["concurrency"], 3);
  EXPECT_EQ(j["n_output_tokens"], 12 * 64);
  std::ifstream fc(csv);
  std::string line;
  ASSERT_TRUE(std::getline(fc, line));
  int64_t n_rows = 0, max_in_flight = 0, finished = 0;
  while (std::getline(fc, line)) {
    ServeTimelineRow r;
    ASSERT_TRUE(parse_serve_timeline_row(line, &r)) << line;
    max_in_flight = std::max<int64_t>(max_in_flight, r.running + r.waiting);
    finished = r.done;
    ++n_rows;
  }
  EXPECT_GE(n_rows, 2);
  EXPECT_GE(max_in_flight, 1);
  EXPECT_LE(max_in_flight, 3);
  EXPECT_EQ(finished, 12);
  std::remove(csv.c_str());
}

TEST_F(BenchServe, DumpedWorkloadFollowsTheSeedAndLengths) {
  const std::string a = cli_temp_path("a.json"), b = cli_temp_path("b.json");
  const std::string args = "bench-serve -m " + model() +
                           " --requests 20 --prompt-len uniform:4:40 --output-len normal:10:3 --shared-prefix 5 "
                           "--arrival poisson:50 --seed 3 --dump-only --dump-workload ";
  ASSERT_EQ(run_cli(args + a).exit_code, 0);
  ASSERT_EQ(run_cli(args + b).exit_code, 0);
  std::ifstream fa(a), fb(b);
  const nlohmann::json ja = nlohmann::json::parse(fa), jb = nlohmann::json::parse(fb);
  std::remove(a.c_str());
  std::remove(b.c_str());
  EXPECT_EQ(ja, jb);  // same seed, same workload
  ASSERT_EQ(ja.size(), 20u);
  const auto prefix = ja[0]["prompt_tokens"].get<std::vector<int32_t>>();
  double last_arrival = -1;
  for (const auto& w : ja) {
    const auto prompt = w["prompt_tokens"].get<std::vector<int32_t>>();
    ASSERT_GE(prompt.size(), 5u + 4);
    EXPECT_LE(prompt.size(), 5u + 40);
    EXPECT_TRUE(std::equal(prompt.begin(), prompt.begin() + 5, prefix.begin())) << "shared prefix";
    EXPECT_EQ(prompt[0], 1) << "BOS first";  // stories260K: <s> = 1
    for (size_t i = 1; i < prompt.size(); ++i) {
      EXPECT_GT(prompt[i], 2) << "no control or end tokens";  // <unk> 0, <s> 1, </s> 2
      EXPECT_LT(prompt[i], 512);
    }
    EXPECT_GE(w["max_tokens"].get<int>(), 1);
    EXPECT_GE(w["arrival_s"].get<double>(), last_arrival);
    last_arrival = w["arrival_s"];
  }
  EXPECT_EQ(ja[0]["arrival_s"].get<double>(), 0.0);
  EXPECT_GT(last_arrival, 0.0);
}

// --backend reaches the engine: the scalar reference backend serves the whole
// workload, and a backend that cannot run here (cuda without a GPU) fails
// with its reason (where it runs, the report ends with its launch counts),
// an unknown one at parsing.
TEST_F(BenchServe, BackendFlagReachesTheEngine) {
  const CliResult cpu = run_cli(common() + " --json");
  const CliResult ref = run_cli(common() + " --backend reference --json");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_EQ(nlohmann::json::parse(cpu.out)["n_output_tokens"], nlohmann::json::parse(ref.out)["n_output_tokens"]);
  const CliResult gpu = run_cli(common() + " --backend cuda --json");
  if (gpu.exit_code != 0) {
    EXPECT_EQ(gpu.exit_code, 1) << gpu.err;
    EXPECT_NE(gpu.err.find("cuda"), std::string::npos) << gpu.err;
  } else {  // a GPU (or the CUDA emulator): the report says how the decode steps were launched
    const CliResult text = run_cli(common() + " --backend cuda");
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("decode steps as CUDA graphs: "), std::string::npos) << text.out;
  }
  const CliResult bad = run_cli(common() + " --backend tpu --json");
  EXPECT_NE(bad.exit_code, 0);
}

TEST_F(BenchServe, BadArgumentsFailCleanly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {common("uniform:9:3"), "--prompt-len: bad distribution 'uniform:9:3'"},
      {common("uniform:4:40", "gauss:4"), "--output-len: bad distribution 'gauss:4'"},
      {common("0"), "--prompt-len: bad distribution '0'"},
      {common("normal:20:-1"), "--prompt-len: bad distribution 'normal:20:-1'"},
      {common() + " --arrival poisson:-1", "--arrival: bad value"},
      {common() + " --arrival ramp:0", "--arrival: bad value"},
      {common() + " --concurrency -1", "--concurrency must be >= 0"},
      {common() + " --timeline /no/such/dir/t.csv", "--timeline: cannot write"},
      {common() + " --ctx-size 32", "exceed the context of 32"},
      {"bench-serve -m /nonexistent/model.gguf", "error:"},
      {common() + " --fluid-split", "--fluid-split shares a budget"},
      {common() + " --fluid-split --mem-budget 64M", "no ring"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_cli(args + " --json");
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

}  // namespace
}  // namespace sluice
