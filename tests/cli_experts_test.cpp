// The CLI on streamed experts (stories-moe under a small --mem-budget): the
// live readiness counts of `run` and `bench`, and `bench-experts` setting the
// timed replay beside a live streamed run of the same prompts; `plan
// parallel --parallel ep` with ranks whose shares stream from their disks.
#include <sstream>
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

// stories-moe with its experts streamed under a small budget: `run` prints,
// per layer, the chosen experts that were ready, late or missed when their
// layer routed (they add up), with the lateness; `bench --json` carries the
// same counts.
TEST(Cli, StreamedExpertsAreCountedReadyLateOrMissedInRunAndBench) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  CliResult run = run_cli("run -m " + moe + " -p 'Once upon a time' -n 16 --temp 0 -t 2 --mem-budget 1500000");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const size_t header = run.err.find("late ms mean/max");
  ASSERT_NE(header, std::string::npos) << run.err;
  std::istringstream rows(run.err.substr(run.err.find('\n', header) + 1));
  int n_rows = 0;
  for (std::string line; std::getline(rows, line);) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    if (w.size() != 12 || w[0].rfind("[sluice]", 0) == 0) break;
    // layer resident recall precision hit kept chosen ready late missed mean/max cancelled
    const uint64_t chosen = std::stoull(w[6]), ready = std::stoull(w[7]), late = std::stoull(w[8]),
                   missed = std::stoull(w[9]);
    EXPECT_GT(chosen, 0u) << line;
    EXPECT_EQ(ready + late + missed, chosen) << line;
    ++n_rows;
  }
  EXPECT_EQ(n_rows, 5) << "4 routed layers and 'all':\n" << run.err;

  CliResult bench = run_cli("bench -m " + moe + " -p 8 -n 8 -r 1 -t 2 --no-probe --mem-budget 1500000 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const auto j = nlohmann::json::parse(bench.out);
  ASSERT_EQ(j["experts"]["layers"].size(), 4u) << bench.out;
  for (const auto& l : j["experts"]["layers"]) {
    EXPECT_GT(l["chosen"].get<uint64_t>(), 0u);
    EXPECT_EQ(l["ready"].get<uint64_t>() + l["late"].get<uint64_t>() + l["missed"].get<uint64_t>(),
              l["chosen"].get<uint64_t>())
        << l.dump();
    EXPECT_GE(l["late_ms_max"].get<double>(), l["late_ms_mean"].get<double>());
  }
}

// bench-experts --mem-budget decodes the prompts again with the experts
// streamed and sets the live run's counts beside the timed replay's with the
// live run's slots: the same routing, the same chosen experts per layer, and
// each side's ready + late + missed adding up. A budget that holds every
// expert is refused (nothing would stream).
TEST(Cli, BenchExpertsComparesTheTimedReplayWithALiveStreamedRun) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  CliResult r = run_cli("bench-experts -m " + moe + " -p 'Once upon a time' -p 'Lily' -n 12 -t 1 --mem-budget 1500000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& live = j["live"];
  ASSERT_TRUE(live.is_object()) << r.out;
  EXPECT_TRUE(live["same_routing"].get<bool>());
  const int64_t slots = live["slots"].get<int64_t>();
  EXPECT_GE(slots, 16);  // one routed layer's experts at least
  const auto& replay = j["usage+prediction+timed (live's slots)"];
  ASSERT_EQ(live["layers"].size(), replay.size());
  int routed = 0;
  for (size_t l = 0; l < replay.size(); ++l) {
    SCOPED_TRACE(l);
    const auto &p = replay[l], &v = live["layers"][l];
    EXPECT_EQ(p["chosen"], v["chosen"]) << "the same routing chooses the same experts";
    if (v["chosen"].get<uint64_t>() == 0) continue;
    ++routed;
    for (const auto* side : {&p, &v}) {
      const uint64_t chosen = (*side)["chosen"].get<uint64_t>(), late = (*side)["late"].get<uint64_t>(),
                     missed = (*side)["missed"].get<uint64_t>();
      const double ready = (*side)["ready"].get<double>();
      EXPECT_NEAR(ready * static_cast<double>(chosen) + static_cast<double>(late + missed), static_cast<double>(chosen), 1e-6);
    }
  }
  EXPECT_EQ(routed, 4);
  CliResult text = run_cli("bench-experts -m " + moe + " -p 'Lily' -n 4 -t 1 --mem-budget 1500000");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("routing identical to the resident trace's"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("| all |"), std::string::npos) << text.out;

  CliResult all = run_cli("bench-experts -m " + moe + " -p 'Lily' -n 2 -t 1 --mem-budget 1G");
  EXPECT_NE(all.exit_code, 0);
  EXPECT_NE(all.err.find("nothing streams live"), std::string::npos) << all.err;
}

// `plan parallel --parallel ep --budget-gb B`: shares beyond the budget
// stream from each rank's disk (a pool of expert slots, the decode reads at
// --disk-gbps in the prediction); a budget below one routed layer's share of
// slots is refused with the least that streams.
TEST(Cli, PlanParallelStreamsExpertSharesBeyondTheBudget) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  auto plan = [&](const std::string& disk_gbps) {
    CliResult r = run_cli("plan parallel -m " + moe +
                          " --parallel ep --ranks 2 --hw h100 --json --budget-gb 0.0008 --disk-gbps " + disk_gbps);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  };
  const nlohmann::json fast = plan("10"), slow = plan("1");
  ASSERT_FALSE(fast.is_discarded());
  ASSERT_FALSE(slow.is_discarded());
  for (const nlohmann::json& rank : fast["ranks"]) {
    EXPECT_GT(rank["expert_slots"].get<int64_t>(), 0) << fast.dump();
    EXPECT_LE(rank["weight_bytes"].get<double>(), 0.0008e9) << fast.dump();
    EXPECT_GT(rank["share_bytes"].get<double>(), 0.0008e9) << fast.dump();
    EXPECT_LT(rank["decode_hit_rate"].get<double>(), 1.0) << fast.dump();
    EXPECT_GT(rank["decode_disk_s"].get<double>(), 0.0) << fast.dump();
  }
  // The reads take ten times as long on a disk ten times slower.
  EXPECT_NEAR(slow["ranks"][1]["decode_disk_s"].get<double>(), 10 * fast["ranks"][1]["decode_disk_s"].get<double>(),
              1e-12);
  EXPECT_GT(fast["predicted"]["decode_disk_s"].get<double>(), 0.0);
  EXPECT_GT(slow["predicted"]["decode_s"].get<double>(), fast["predicted"]["decode_s"].get<double>());
  const CliResult text =
      run_cli("plan parallel -m " + moe + " --parallel ep --ranks 2 --hw h100 --budget-gb 0.0008 --disk-gbps 1");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("rank(s) 0, 1 stream their share from their own disk"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ms waiting on disks"), std::string::npos) << text.out;
  const CliResult refused =
      run_cli("plan parallel -m " + moe + " --parallel ep --ranks 2 --hw h100 --budget-gb 0.0001");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("streaming the share from its disk needs at least"), std::string::npos) << refused.err;
}

// A routed model's pipeline ranks beyond their budgets pool expert slots for
// their ranges (pp), or for their stage's share (pp,ep).
TEST(Cli, PlanParallelStreamsARoutedRangesExpertsBeyondTheBudget) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  CliResult r = run_cli("plan parallel -m " + moe +
                        " --parallel pp --ranks 2 --hw h100 --json --budget-gb 0.001 --disk-gbps 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  for (const nlohmann::json& rank : j["ranks"]) {
    EXPECT_GT(rank["expert_slots"].get<int64_t>(), 0) << j.dump();
    EXPECT_LE(rank["weight_bytes"].get<double>(), 0.001e9) << j.dump();
    EXPECT_GT(rank["range_bytes"].get<double>(), 0.001e9) << j.dump();
    EXPECT_GT(rank["disk_s"].get<double>(), 0.0) << j.dump();
    EXPECT_TRUE(rank["streamed_layers"].empty()) << j.dump();  // layers stay; experts stream
  }
  EXPECT_GT(j["predicted"]["decode_disk_s"].get<double>(), 0.0);
  r = run_cli("plan parallel -m " + moe + " --parallel pp --ranks 2 --hw h100 --budget-gb 0.0008 --disk-gbps 10");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot be cut into 2 ranges"), std::string::npos) << r.err;
  r = run_cli("plan parallel -m " + moe +
              " --parallel pp,ep --ranks 4 --ep-size 2 --hw h100 --json --budget-gb 0.0006 --disk-gbps 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["ranks"].size(), 4u);
  EXPECT_TRUE(j["ranks"][0]["streams"].get<bool>()) << j.dump();  // the head, layers 0-1 and experts 0-7
  EXPECT_GT(j["ranks"][0]["expert_slots"].get<int64_t>(), 0) << j.dump();
  EXPECT_LE(j["ranks"][0]["weight_bytes"].get<double>(), 0.0006e9) << j.dump();
  const CliResult text = run_cli("plan parallel -m " + moe +
                                 " --parallel pp,ep --ranks 4 --ep-size 2 --hw h100 --budget-gb 0.0006 --disk-gbps 10");
  EXPECT_NE(text.out.find("stream their share's experts from their own disk"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  rank 0 experts 0-7: a pool of"), std::string::npos) << text.out;
}

// `plan parallel --calibrate`: each rank stands for a machine like this one,
// its forward timed here by rows (as a job's ranks time theirs at start), and
// no two ranks share a disk.
TEST(Cli, PlanParallelCalibratedTimesThisMachinesForwardByRows) {
  const std::string moe = testing::shipped_model_path("stories-moe-f16.gguf");
  const CliResult r = run_cli("plan parallel --calibrate -t 1 -m " + moe + " --parallel pp --ranks 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 forward TFLOP/s by rows at once: 8 "), std::string::npos) << r.out;
  // (The attention term, "ns a query per earlier key", is the difference of
  // two timings and may come out 0 on a loaded machine: ForwardProbe's test.)
  EXPECT_NE(r.out.find("#1 "), std::string::npos) << r.out;  // its own machine
  EXPECT_EQ(r.out.find("every rank at once"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sluice
