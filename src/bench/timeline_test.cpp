#include "bench/timeline.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace sluice::bench {
namespace {

TimelineSample at(double t, int64_t running, int64_t total, int64_t demoted) {
  return {.t_s = t, .running = running, .waiting = 2, .kv_used = running * 3, .kv_total = total, .demoted = demoted};
}

TEST(Timeline, KeepsChangesAndOnePointAGapOnFlatStretches) {
  Timeline tl(0.1);
  tl.add(at(0.000, 1, 10, 0));
  tl.add(at(0.005, 1, 10, 0));  // unchanged, within the gap: dropped
  tl.add(at(0.010, 2, 10, 0));  // changed: kept
  tl.add(at(0.050, 2, 10, 0));  // dropped
  tl.add(at(0.200, 2, 10, 0));  // a gap since the last kept: kept
  tl.add(at(0.210, 2, 19, 1));  // the split moved: kept
  ASSERT_EQ(tl.samples().size(), 4u);
  EXPECT_EQ(tl.samples()[1].t_s, 0.010);
  EXPECT_EQ(tl.samples()[3].demoted, 1);
  const std::string csv = tl.csv();
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "t_s,running,waiting,kv_blocks_used,kv_blocks_total,fluid_demoted_units,preemptions,finished");
  EXPECT_NE(csv.find("\n0.2100,2,2,6,19,1,0,0\n"), std::string::npos) << csv;
}

TEST(Timeline, DrawsEachSeriesAsASteppedLineOverOneTimeAxis) {
  Timeline tl(0.1);
  tl.add(at(0.0, 1, 10, 0));
  tl.add(at(1.0, 4, 10, 0));
  tl.add(at(2.0, 4, 19, 1));
  const std::string svg = tl.svg("8B <fixed & fluid>");
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("8B &lt;fixed &amp; fluid&gt;"), std::string::npos);  // the title escaped
  // Six series (running, waiting, pool, in use, units given up, preemptions),
  // each a point a sample and one more a step after the first.
  size_t n_lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    ++n_lines;
    const size_t begin = svg.find("points=\"", at) + 8, end = svg.find('"', begin);
    std::istringstream points(svg.substr(begin, end - begin));
    std::string point;
    int n = 0;
    while (points >> point) ++n;
    EXPECT_EQ(n, 5) << svg.substr(at, end - at);
  }
  EXPECT_EQ(n_lines, 6u);
  // The running line steps up to its top (4 of 4: the panel's top edge, y 36)
  // at t = 1 s (x = 60 + 560 / 2).
  EXPECT_NE(svg.find("340.0,36.0"), std::string::npos) << svg;
  EXPECT_NE(svg.find("2.00 s"), std::string::npos);
}

TEST(Timeline, WritesCsvOrSvgByTheFileName) {
  Timeline tl;
  tl.add(at(0.0, 1, 10, 0));
  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE(tl.write(dir + "timeline.csv", "t").ok());
  ASSERT_TRUE(tl.write(dir + "timeline.svg", "t").ok());
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(read(dir + "timeline.csv").rfind("t_s,", 0), 0u);
  EXPECT_EQ(read(dir + "timeline.svg").rfind("<svg", 0), 0u);
  const Status bad = tl.write(dir + "no/such/dir/t.csv", "t");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--timeline: cannot write"), std::string::npos);
  std::remove((dir + "timeline.csv").c_str());
  std::remove((dir + "timeline.svg").c_str());
}

}  // namespace
}  // namespace sluice::bench
