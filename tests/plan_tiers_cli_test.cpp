// `sluice plan tiers` end to end: a synth Mixtral-8x7B Q4_0 under a 6 GB GPU
// budget and 10 GB of host RAM (issue #43's configuration) split over all
// three tiers, a dense preset's layer map, a real routed GGUF file, and
// budgets that cannot work refused with the smallest that would.
#include <cmath>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace sluice {
namespace {

using ::sluice::testing::CliResult;
using ::sluice::testing::run_cli;

nlohmann::json run_json(const std::string& args) {
  CliResult r = run_cli("plan tiers " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

TEST(PlanTiersCli, MixtralExpertsOverThreeTiers) {
  const nlohmann::json j = run_json("-m mixtral-8x7b --weights q4_0 --gpu-budget 6G --mem-budget 10G");
  ASSERT_FALSE(j.is_null());
  EXPECT_TRUE(j["routed"].get<bool>());
  EXPECT_DOUBLE_EQ(j["rates"]["hbm_gbps"].get<double>(), 4200);  // the H200 defaults
  EXPECT_DOUBLE_EQ(j["rates"]["h2d_gbps"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["rates"]["disk_gbps"].get<double>(), 6);
  const auto& e = j["experts"];
  EXPECT_EQ(e["total"].get<int64_t>(), 32 * 8);
  EXPECT_EQ(e["hbm"].get<int64_t>() + e["host"].get<int64_t>() + e["disk"].get<int64_t>(), 256);
  EXPECT_GT(e["hbm"].get<int64_t>(), 8);   // at least one layer's worth
  EXPECT_GT(e["host"].get<int64_t>(), 0);
  EXPECT_GT(e["disk"].get<int64_t>(), 0);
  // Each tier within its budget, the host's experts and staging filling it to within one expert.
  const double x = j["unit_bytes"].get<double>();
  EXPECT_LE(j["hbm_bytes"].get<double>(), 6e9);
  EXPECT_GT(j["hbm_bytes"].get<double>(), 6e9 - x);
  EXPECT_LE(j["host_bytes"].get<double>(), 10e9);
  EXPECT_GT(j["host_bytes"].get<double>(), 10e9 - x);
  EXPECT_EQ(j["n_staging_slots"].get<int64_t>(), 2);
  EXPECT_NEAR(j["disk_only_bytes"].get<double>(), e["disk"].get<double>() * x, 1);
  // Decode: the step is its slowest leg; the disk reads the misses not in host.
  const auto& d = j["decode"];
  EXPECT_GE(d["step_s"].get<double>(), d["compute_s"].get<double>());
  EXPECT_NEAR(d["disk_s"].get<double>(), d["disk_bytes"].get<double>() / 6e9, 1e-12);
  EXPECT_NEAR(d["h2d_s"].get<double>(), d["h2d_bytes"].get<double>() / 50e9, 1e-12);
  EXPECT_EQ(d["bound"].get<std::string>(), "disk");
  EXPECT_NEAR(d["stall_s"].get<double>(), d["step_s"].get<double>() - d["compute_s"].get<double>(), 1e-12);
  EXPECT_EQ(j["prefill"]["tokens"].get<int64_t>(), 512);

  // The text map names the three tiers and the legs.
  CliResult text = run_cli("plan tiers -m mixtral-8x7b --weights q4_0 --gpu-budget 6G --mem-budget 10G");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* word : {"hbm ", "host ", "disk ", "decode", "prefill", "stall/token", "expert slots"})
    EXPECT_NE(text.out.find(word), std::string::npos) << word << "\n" << text.out;
}

TEST(PlanTiersCli, DenseLayerMapAndHostBudgetFlags) {
  // llama-3-8b at q4_0 (~4.6 GB): 2 GB of HBM, 1 GB of host; --budget-gb is the host budget too.
  const nlohmann::json a = run_json("-m llama-3-8b --weights q4_0 --gpu-budget 2G --mem-budget 1G");
  const nlohmann::json b = run_json("-m llama-3-8b --weights q4_0 --gpu-budget 2G --budget-gb 1");
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a["layers"], b["layers"]);
  const std::string map = a["layers"]["map"].get<std::string>();
  EXPECT_EQ(map.size(), 32u);
  int64_t g = 0, h = 0, d = 0;
  for (char c : map) (c == 'G' ? g : c == 'H' ? h : d) += 1;
  EXPECT_EQ(g, a["layers"]["hbm"].get<int64_t>());
  EXPECT_EQ(h, a["layers"]["host"].get<int64_t>());
  EXPECT_EQ(d, a["layers"]["disk"].get<int64_t>());
  EXPECT_GT(g * h * d, 0);
  EXPECT_EQ(a["n_ring_slots"].get<int64_t>(), 2);
  // The fluid split's price list: each doubling of the layers HBM gives the
  // KV pool holds twice the positions and costs the decode step more.
  const nlohmann::json& fluid = a["fluid"];
  ASSERT_GE(fluid.size(), 2u);
  EXPECT_EQ(fluid[0]["units"].get<int64_t>(), 1);
  EXPECT_NEAR(fluid[1]["kv_tokens_f16"].get<double>(), 2 * fluid[0]["kv_tokens_f16"].get<double>(), 1e-6);
  EXPECT_GT(fluid[0]["decode_step_added_s"].get<double>(), 0);
  EXPECT_GT(fluid[1]["decode_step_added_s"].get<double>(), fluid[0]["decode_step_added_s"].get<double>());
  // Everything resident without budgets: no legs but compute.
  const nlohmann::json all = run_json("-m llama-3-8b --weights q4_0");
  EXPECT_EQ(all["layers"]["map"].get<std::string>(), std::string(32, 'G'));
  EXPECT_EQ(all["decode"]["bound"].get<std::string>(), "compute");
  EXPECT_EQ(all["decode"]["stall_s"].get<double>(), 0);
}

TEST(PlanTiersCli, RealRoutedFile) {
  const std::string file = std::string(SLUICE_SHARED_DIR) + "/models/stories-moe/stories-moe.gguf";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " not found";
  const nlohmann::json all = run_json("-m " + file);
  ASSERT_FALSE(all.is_null());
  EXPECT_TRUE(all["routed"].get<bool>());
  const int64_t n = all["experts"]["total"].get<int64_t>();
  EXPECT_EQ(all["experts"]["hbm"].get<int64_t>(), n);
  // The smallest GPU budget the plan names works, and one byte less is refused.
  const auto min_gpu = static_cast<int64_t>(std::ceil(all["min_gpu_budget_bytes"].get<double>()));
  const nlohmann::json at_min = run_json("-m " + file + " --gpu-budget " + std::to_string(min_gpu));
  ASSERT_FALSE(at_min.is_null());
  EXPECT_LT(at_min["experts"]["hbm"].get<int64_t>(), n);
  CliResult below = run_cli("plan tiers -m " + file + " --gpu-budget " + std::to_string(min_gpu - 1));
  EXPECT_NE(below.exit_code, 0);
  EXPECT_NE(below.err.find(std::to_string(min_gpu) + " bytes"), std::string::npos) << below.err;
}

TEST(PlanTiersCli, BadRequestsFailCleanly) {
  CliResult r = run_cli("plan tiers -m llama-3-8b --gpu-budget 100M");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("smallest GPU budget"), std::string::npos) << r.err;
  r = run_cli("plan tiers -m llama-3-8b --weights q4_0 --gpu-budget 2G --mem-budget 100M");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("smallest host budget"), std::string::npos) << r.err;
  r = run_cli("plan tiers -m llama-3-8b --gpu-budget 6X");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--gpu-budget"), std::string::npos) << r.err;
  r = run_cli("plan tiers -m no-such-model");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("synth preset"), std::string::npos) << r.err;
  r = run_cli("plan tiers -m llama-3-8b --h2d-gbps 0");
  EXPECT_NE(r.exit_code, 0);
  r = run_cli("plan tiers -m llama-3-8b --mem-budget 1G --budget-gb 1");
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace sluice
