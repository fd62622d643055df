// ExpertCells: the per-expert series read by cell through the metrics kept
// from one walk of the registry, walked again only when a series is created
// or the model's shape changes; the matrices written as JSON text.
#include "server/expert_cells.h"

#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::server {
namespace {

using json = nlohmann::json;

std::string cell_labels(int l, int e) { return "layer=\"" + std::to_string(l) + "\",expert=\"" + std::to_string(e) + "\""; }

json written(const ExpertCells& cells, const ExpertCells::Matrix* m, const std::vector<double>* values = nullptr) {
  std::string out;
  cells.write(out, m, values);
  return json::parse(out);
}

TEST(ExpertCells, HoldsOnlyThePerExpertFamilies) {
  for (const char* f : {"sluice_expert_routed_total", "sluice_expert_resident", "sluice_expert_chosen",
                        "sluice_expert_predicted"})
    EXPECT_TRUE(ExpertCells::holds(f)) << f;
  for (const char* f : {"sluice_experts_resident", "sluice_expert_recall", "sluice_expert_read_bytes", ""})
    EXPECT_FALSE(ExpertCells::holds(f)) << f;
}

TEST(ExpertCells, ReadsNewValuesAndFindsSeriesCreatedSinceTheLastRead) {
  MetricRegistry r;
  Counter* routed00 = r.counter("sluice_expert_routed_total", "r", cell_labels(0, 0));
  Gauge* ready01 = r.gauge("sluice_expert_chosen", "c", cell_labels(0, 1) + ",readiness=\"ready\"");
  r.gauge("sluice_other", "o")->set(5);
  routed00->add(3);
  ready01->set(7);
  ExpertCells cells;
  cells.read(r, 2, 2);
  const ExpertCells::Matrix* routed = cells.find("sluice_expert_routed_total");
  ASSERT_NE(routed, nullptr);
  EXPECT_EQ(routed->value, (std::vector<double>{3, 0, 0, 0}));
  EXPECT_EQ(routed->present, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(cells.find("sluice_expert_chosen", ",readiness=\"late\""), nullptr);
  EXPECT_EQ(cells.find("sluice_other"), nullptr);

  // New values of the same series: read through the kept metrics.
  routed00->add(4);
  ready01->set(9);
  cells.read(r, 2, 2);
  EXPECT_EQ(cells.find("sluice_expert_routed_total")->value[0], 7);
  EXPECT_EQ(cells.find("sluice_expert_chosen", ",readiness=\"ready\"")->value[1], 9);

  // A series created since (a layer's counters made later, a new family): found.
  r.counter("sluice_expert_routed_total", "r", cell_labels(1, 1))->add(2);
  r.gauge("sluice_expert_chosen", "c", cell_labels(1, 0) + ",readiness=\"late\"")->set(6);
  cells.read(r, 2, 2);
  routed = cells.find("sluice_expert_routed_total");
  EXPECT_EQ(routed->value, (std::vector<double>{7, 0, 0, 2}));
  EXPECT_EQ(routed->present, (std::vector<uint8_t>{1, 0, 0, 1}));
  ASSERT_NE(cells.find("sluice_expert_chosen", ",readiness=\"late\""), nullptr);
  EXPECT_EQ(cells.find("sluice_expert_chosen", ",readiness=\"late\"")->value[2], 6);

  // Another shape: the cells follow it (a cell beyond it dropped).
  cells.read(r, 1, 2);
  EXPECT_EQ(cells.find("sluice_expert_routed_total")->value, (std::vector<double>{7, 0}));
  EXPECT_EQ(cells.find("sluice_expert_chosen", ",readiness=\"late\""), nullptr);  // its one cell is in layer 1
  cells.read(r, 0, 0);
  EXPECT_EQ(cells.find("sluice_expert_routed_total"), nullptr);
  EXPECT_EQ(written(cells, nullptr), json::array());
}

TEST(ExpertCells, SeriesNotInTheEnginesLabelOrderOrBeyondTheModelAreNoCells) {
  MetricRegistry r;
  r.gauge("sluice_expert_resident", "r", "expert=\"0\",layer=\"0\"")->set(1);
  r.gauge("sluice_expert_resident", "r", cell_labels(5, 0))->set(1);
  r.gauge("sluice_expert_resident", "r", cell_labels(0, 9))->set(1);
  r.gauge("sluice_expert_resident", "r", "layer=\"x\",expert=\"0\"")->set(1);
  ExpertCells cells;
  cells.read(r, 2, 3);
  EXPECT_EQ(cells.find("sluice_expert_resident"), nullptr);
}

TEST(ExpertCells, WritesRowsWithNullForDenseLayersAndWholeNumbersAsIntegers) {
  MetricRegistry r;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const double values[] = {3, 0.25, nan, -inf, 1e20, -2};
  for (int e = 0; e < 6; ++e) r.gauge("sluice_expert_resident", "r", cell_labels(1, e))->set(values[e]);
  r.gauge("sluice_expert_resident", "r", cell_labels(2, 0))->set(4);  // layer 2: expert 0 only
  ExpertCells cells;
  cells.read(r, 3, 6);
  const ExpertCells::Matrix* m = cells.find("sluice_expert_resident");
  ASSERT_NE(m, nullptr);
  std::string text;
  cells.write(text, m);
  EXPECT_EQ(text, "[null,[3,0.25,0,0,1e+20,-2],[4,0,0,0,0,0]]");
  const json j = json::parse(text);
  EXPECT_TRUE(j[1][0].is_number_integer());
  EXPECT_TRUE(j[1][1].is_number_float());
  // Values derived from the matrix, on its cells.
  std::vector<double> twice(m->value.size());
  for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * m->value[i];
  EXPECT_EQ(written(cells, m, &twice)[1][1].get<double>(), 0.5);
  EXPECT_EQ(written(cells, m, &twice)[2][0].get<double>(), 8);
  // No matrix: every layer null.
  EXPECT_EQ(written(cells, nullptr), (json{nullptr, nullptr, nullptr}));
}

}  // namespace
}  // namespace sluice::server
