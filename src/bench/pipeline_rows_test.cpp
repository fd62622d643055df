#include "bench/pipeline_rows.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::bench {
namespace {

PipelineRow ran(int64_t tokens, double resident_s, double stream_s) {
  PipelineRow r{.tokens = tokens, .compute_layer_s = resident_s / 4, .gflops = 12.5, .transfer_layer_s = 0.002,
                .resident_step_s = resident_s, .stream_step_s = stream_s, .k_planned = 3, .k_used = 2,
                .host_buffer_bytes = 3 << 20, .predicted_stall_s = 0.001, .measured_stall_s = 0.0015,
                .overlap_efficiency = 0.9, .disk_mb_per_token = 1.3, .page_cache_growth = 2e6, .n_streamed = 4};
  set_overhead(r);
  return r;
}

TEST(PipelineRows, OverheadAndVerdict) {
  const PipelineRow hidden = ran(1, 0.100, 0.104);
  EXPECT_NEAR(hidden.overhead, 0.04, 1e-12);
  EXPECT_EQ(hidden.verdict, "fully hidden");
  const PipelineRow limited = ran(1, 0.100, 0.150);
  EXPECT_NEAR(limited.overhead, 0.5, 1e-12);
  EXPECT_EQ(limited.verdict, "transfer-limited");
}

TEST(PipelineRows, JsonCarriesTheStreamedFiguresOrTheRefusal) {
  PipelineRow refused{.tokens = 64, .resident_step_s = 0.2, .verdict = "refused", .refused = "budget too small"};
  const std::vector<PipelineRow> rows = {ran(1, 0.1, 0.12), refused};
  const nlohmann::ordered_json j = pipeline_rows_json(rows);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["tokens"], 1);
  EXPECT_EQ(j[0]["verdict"], "transfer-limited");
  EXPECT_EQ(j[0]["k_used"], 2);
  EXPECT_EQ(j[0]["stall_s"], 0.0015);
  EXPECT_FALSE(j[0].contains("refused"));
  EXPECT_EQ(j[1]["refused"], "budget too small");
  EXPECT_FALSE(j[1].contains("stream_step_s"));
  EXPECT_EQ(j[1]["resident_step_s"], 0.2);
}

TEST(PipelineRows, TableHasARowPerTokenCountAndALinePerRowThatRan) {
  PipelineRow refused{.tokens = 64, .refused = "budget too small"};
  const std::vector<PipelineRow> rows = {ran(1, 0.1, 0.102), refused};
  const std::string t = pipeline_rows_table(rows);
  EXPECT_NE(t.find("|      1 |      25.00 ms |        2.00 ms |     12.5 |    100.00 ms |    102.00 ms |     2.0% |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("fully hidden"), std::string::npos);
  EXPECT_NE(t.find("3/2"), std::string::npos);
  EXPECT_NE(t.find("3.00 MiB"), std::string::npos);
  EXPECT_NE(t.find("|     64 |"), std::string::npos);
  EXPECT_NE(t.find("refused: budget too small"), std::string::npos);
  EXPECT_NE(t.find("  1 tokens: overlap efficiency 90.0%, 1.3 MB/token from disk, page cache +2.0 MB"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("64 tokens: overlap"), std::string::npos) << "a refused row has no streamed figures";
}

}  // namespace
}  // namespace sluice::bench
