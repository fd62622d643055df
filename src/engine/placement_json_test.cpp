// placement_json: each tier of a layer counted separately, for the GPU under
// a budget (device and pinned host memory), streamed experts (their bytes on
// disk, the rest in RAM), streamed layers and a pipeline's other ranks.
#include "engine/placement_json.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(PlacementJson, UnderAGpuBudgetALayerShowsItsDeviceAndHostBytesApart) {
  // Layers 0 and 1 on the device; 2 half in pinned host memory; 3 all of it.
  const PlacementFacts f{.gpu = true, .layer_bytes = {100, 100, 100, 100}, .layer_host_bytes = {0, 0, 50, 100},
                         .layer_moe = {0, 0, 0, 0}, .layer_begin = 0, .layer_end = 4};
  const auto p = placement_json(f);
  EXPECT_EQ(p["mode"], "resident");
  EXPECT_EQ(p["compute"], "gpu");
  ASSERT_EQ(p["layers"].size(), 4u);
  EXPECT_EQ(p["layers"][0]["tier"], "gpu");
  EXPECT_EQ(p["layers"][0]["tiers"], nlohmann::ordered_json({{"gpu", 100}}));
  EXPECT_EQ(p["layers"][2]["tiers"], nlohmann::ordered_json({{"gpu", 50}, {"ram", 50}}));
  EXPECT_EQ(p["layers"][3]["tier"], "ram");
  EXPECT_EQ(p["layers"][3]["tiers"], nlohmann::ordered_json({{"ram", 100}}));
  EXPECT_FALSE(p.contains("experts"));
  for (const auto& l : p["layers"]) EXPECT_EQ(l["bytes"], 100);
}

TEST(PlacementJson, StreamedExpertsAreOnDiskAndTheRestOfTheLayerInRam) {
  const PlacementFacts f{.layer_bytes = {30, 100, 100}, .layer_expert_bytes = {0, 80, 80}, .layer_moe = {0, 1, 1},
                         .layer_begin = 0, .layer_end = 3, .weights_streamed = true, .n_expert_slots = 24,
                         .expert_bytes = 5};
  const auto p = placement_json(f);
  EXPECT_EQ(p["mode"], "experts");
  EXPECT_EQ(p["compute"], "ram");
  EXPECT_EQ(p["layers"][0]["tiers"], nlohmann::ordered_json({{"ram", 30}}));
  EXPECT_EQ(p["layers"][1]["tiers"], nlohmann::ordered_json({{"ram", 20}, {"disk", 80}}));
  EXPECT_EQ(p["layers"][1]["tier"], "disk");
  EXPECT_TRUE(p["layers"][1]["moe"].get<bool>());
  EXPECT_EQ(p["experts"]["tier"], "disk");
  EXPECT_EQ(p["experts"]["n_slots"], 24);
  EXPECT_EQ(p["experts"]["expert_bytes"], 5);
}

TEST(PlacementJson, StreamedLayersAndAnotherRanksLayersAreWhole) {
  PlacementFacts f{.layer_bytes = {10, 10, 10, 10}, .layer_moe = {0, 0, 0, 0}, .layer_streamed = {0, 1, 1, 0},
                   .layer_begin = 0, .layer_end = 4, .weights_streamed = true};
  auto p = placement_json(f);
  EXPECT_EQ(p["mode"], "layers");
  EXPECT_EQ(p["layers"][1]["tiers"], nlohmann::ordered_json({{"disk", 10}}));
  EXPECT_EQ(p["layers"][3]["tiers"], nlohmann::ordered_json({{"ram", 10}}));
  f = PlacementFacts{.gpu = true, .layer_bytes = {10, 10, 10, 10}, .layer_begin = 2, .layer_end = 4};
  p = placement_json(f);
  EXPECT_EQ(p["mode"], "pipeline");
  EXPECT_EQ(p["layers"][0]["tier"], "rank");
  EXPECT_EQ(p["layers"][1]["tiers"], nlohmann::ordered_json({{"rank", 10}}));
  EXPECT_EQ(p["layers"][2]["tiers"], nlohmann::ordered_json({{"gpu", 10}}));
}

}  // namespace
}  // namespace sluice
