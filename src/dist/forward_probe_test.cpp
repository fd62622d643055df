#include "dist/forward_probe.h"

#include <gtest/gtest.h>

#include <iterator>

#include "base/test_data.h"

namespace sluice::dist {
namespace {

const std::string kModel = testing::model_path("stories260K/stories260K.gguf");

TEST(ForwardProbe, TimesTheModelsOwnLayersAtEachRowCount) {
  SKIP_UNLESS_EXISTS(kModel);
  auto probe = ForwardProbe::create(kModel, 1, 0, 64);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  ASSERT_NE(*probe, nullptr);
  static constexpr int64_t kRows[] = {4, 16, 64, 128};  // 128 > max_rows: skipped
  auto curve = (*probe)->curve(kRows, 0.01);
  ASSERT_TRUE(curve.ok()) << curve.status().to_string();
  ASSERT_EQ(curve->points().size(), 3u);
  for (const plan::RatePoint& p : curve->points()) EXPECT_GT(p.rate, 0) << p.n_tokens;
  EXPECT_EQ(curve->points().back().n_tokens, 64);
  // Timing it again gives rates again (the KV rows are rewritten in place).
  auto again = (*probe)->curve(kRows, 0.01);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->points().size(), 3u);
}

TEST(ForwardProbe, AloneGivesTheCurveAttentionAndTheFileOrderCurve) {
  SKIP_UNLESS_EXISTS(kModel);
  auto probe = ForwardProbe::create(kModel, 1, 0, kForwardProbeMaxRows);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  ASSERT_NE(*probe, nullptr);
  auto r = (*probe)->time_alone(/*streamed=*/true, 0.01);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->curve.points().size(), std::size(kForwardProbeRows));
  EXPECT_EQ(r->streamed.points().size(), std::size(kForwardProbeRows));
  EXPECT_GE(r->attention_pair_s, 0.0);
  auto without = (*probe)->time_alone(/*streamed=*/false, 0.01);
  ASSERT_TRUE(without.ok());
  EXPECT_TRUE(without->streamed.empty());
}

TEST(ForwardProbe, NothingWhenNotOneLayerFitsTheCap) {
  SKIP_UNLESS_EXISTS(kModel);
  auto probe = ForwardProbe::create(kModel, 1, /*cap_bytes=*/1000, 64);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  EXPECT_EQ(*probe, nullptr);
}

TEST(ForwardProbe, AFileThatIsNotAModelIsAnError) {
  EXPECT_FALSE(ForwardProbe::create("/nonexistent/model.gguf", 1, 0, 64).ok());
}

}  // namespace
}  // namespace sluice::dist
