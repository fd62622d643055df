// ExpertHeat: per (layer, expert) counts land in their own cell, and a
// snapshot taken while another thread counts sees counts that only grow.
#include "weights/expert_heat.h"

#include <thread>

#include <gtest/gtest.h>

namespace sluice::weights {
namespace {

TEST(ExpertHeat, CountsLandInTheirOwnCell) {
  ExpertHeat heat(3, 4);
  heat.count_chosen(1, 2, ExpertReadiness::kReady);
  heat.count_chosen(1, 2, ExpertReadiness::kLate);
  heat.count_chosen(1, 2, ExpertReadiness::kMissed);
  heat.count_chosen(2, 0, ExpertReadiness::kMissed);
  heat.count_predicted(1, 2, true);
  heat.count_predicted(1, 3, false);
  heat.set_resident(0, 3, true);
  heat.set_resident(1, 2, true);
  heat.set_resident(1, 2, false);
  const ExpertHeatSnapshot s = heat.snapshot();
  ASSERT_EQ(s.n_layer, 3);
  ASSERT_EQ(s.n_expert, 4);
  ASSERT_EQ(s.cells.size(), 12u);
  const ExpertHeatCell& c = s.at(1, 2);
  EXPECT_EQ(c.ready, 1u);
  EXPECT_EQ(c.late, 1u);
  EXPECT_EQ(c.missed, 1u);
  EXPECT_EQ(c.chosen(), 3u);
  EXPECT_EQ(c.predicted, 1u);
  EXPECT_EQ(c.predicted_chosen, 1u);
  EXPECT_FALSE(c.resident);
  EXPECT_EQ(s.at(1, 3).predicted, 1u);
  EXPECT_EQ(s.at(1, 3).predicted_chosen, 0u);
  EXPECT_EQ(s.at(2, 0).missed, 1u);
  EXPECT_TRUE(s.at(0, 3).resident);
  // Nothing else moved.
  uint64_t chosen = 0, resident = 0;
  for (const ExpertHeatCell& x : s.cells) {
    chosen += x.chosen();
    resident += x.resident;
  }
  EXPECT_EQ(chosen, 4u);
  EXPECT_EQ(resident, 1u);
}

TEST(ExpertHeat, SnapshotsWhileCountingSeeNoMoreThanWasCounted) {
  ExpertHeat heat(2, 8);
  constexpr uint64_t kSteps = 20000;
  std::thread writer([&] {
    for (uint64_t i = 0; i < kSteps; ++i) {
      heat.count_chosen(1, static_cast<int64_t>(i % 8), ExpertReadiness::kReady);
      heat.count_predicted(1, static_cast<int64_t>(i % 8), true);
    }
  });
  uint64_t last = 0;
  for (int k = 0; k < 50; ++k) {
    const ExpertHeatSnapshot s = heat.snapshot();
    uint64_t n = 0;
    for (int64_t e = 0; e < 8; ++e) n += s.at(1, e).ready;
    EXPECT_GE(n, last);  // counts only grow
    EXPECT_LE(n, kSteps);
    last = n;
  }
  writer.join();
  const ExpertHeatSnapshot s = heat.snapshot();
  for (int64_t e = 0; e < 8; ++e) {
    EXPECT_EQ(s.at(1, e).ready, kSteps / 8);
    EXPECT_EQ(s.at(1, e).predicted_chosen, kSteps / 8);
  }
  EXPECT_EQ(s.at(0, 0).chosen(), 0u);
}

}  // namespace
}  // namespace sluice::weights
