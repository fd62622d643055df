// StatsFeed (the registry as JSON, with rates) and the live-view routes of
// HttpServer: GET / (the page), GET /stats and /stats/stream, in front of a
// real Engine on stories-moe (routed counts per layer and expert; streamed
// experts' residency, readiness and predictions per expert) with and without
// an API key.
#include "server/stats_feed.h"

#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "plan/calibrate.h"
#include "server/http_server.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

TEST(StatsFeed, ParsesPrometheusLabels) {
  const auto l = parse_labels(R"(tier="disk",link="0->1",q="a\"b\\c")");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l.at("tier"), "disk");
  EXPECT_EQ(l.at("link"), "0->1");
  EXPECT_EQ(l.at("q"), "a\"b\\c");
  EXPECT_TRUE(parse_labels("").empty());
}

TEST(StatsFeed, SnapshotHoldsTheRegistrysNumbersAndRates) {
  MetricRegistry r;
  Counter* tokens = r.counter("sluice_generated_tokens_total", "t");
  Gauge* used = r.gauge("sluice_kv_blocks_used", "u");
  Gauge* total = r.gauge("sluice_kv_blocks_total", "t");
  Histogram* ttft = r.histogram("sluice_ttft_seconds", "t", exponential_buckets(0.001, 2.0, 18));
  Counter* link = r.counter("sluice_dist_bytes_sent_total", "b", "link=\"0->1\"");
  Gauge* disk = r.gauge("sluice_weight_read_bytes", "w", "tier=\"disk\"");
  tokens->add(5);
  used->set(3);
  total->set(40);
  ttft->observe(0.01);
  ttft->observe(0.02);
  StatsFeed feed(r, /*min_window_s=*/0.0);
  const auto a = feed.snapshot("");
  EXPECT_EQ(a["kv"]["blocks_used"], 3);
  EXPECT_EQ(a["kv"]["blocks_total"], 40);
  EXPECT_EQ(a["throughput"]["generated_tokens"], 5);
  EXPECT_EQ(a["latency"]["ttft_s"]["count"], 2);
  EXPECT_NEAR(a["latency"]["ttft_s"]["mean"].get<double>(), 0.015, 1e-9);
  EXPECT_NEAR(a["latency"]["ttft_s"]["p50"].get<double>(), ttft->quantile(0.5), 1e-12);
  EXPECT_EQ(a["metrics"]["sluice_kv_blocks_used"][0]["value"], 3);
  EXPECT_FALSE(a.contains("experts"));  // no model with experts

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  tokens->add(100);
  link->add(4096);
  disk->set(1 << 20);
  const auto b = feed.snapshot("");
  const double w = b["rate_window_s"].get<double>();
  ASSERT_GT(w, 0.0);
  EXPECT_NEAR(b["throughput"]["tokens_per_s"].get<double>(), 100 / w, 1e-6 * 100 / w);
  std::map<std::string, json> legs;
  for (const auto& l : b["legs"]) legs[l["leg"].get<std::string>()] = l;
  ASSERT_TRUE(legs.count("rank 0->1")) << b["legs"].dump();
  EXPECT_EQ(legs["rank 0->1"]["bytes"], 4096);
  EXPECT_NEAR(legs["rank 0->1"]["bytes_per_s"].get<double>(), 4096 / w, 1e-6 * 4096 / w);
  ASSERT_TRUE(legs.count("disk -> ram (layers)"));
  EXPECT_NEAR(legs["disk -> ram (layers)"]["bytes_per_s"].get<double>(), (1 << 20) / w, 1e-3 * (1 << 20) / w);
}

// The expert matrices from the registry's per-expert series (engine_metrics.h),
// cell by cell: a dense layer (no series) is null, a cell with no series 0,
// "predicted" the sum of routed="yes" and "no"; series with other labels are
// not cells, and the per-expert families stay out of "metrics". Also the legs
// (only byte series) among many series that are not legs.
TEST(StatsFeed, ExpertMatricesAndLegsHoldTheRegistrysCells) {
  MetricRegistry r;
  constexpr int kLayers = 3, kExperts = 5;  // layer 1 dense
  auto cell = [](int l, int e) { return 100.0 * l + 10.0 * e; };
  std::vector<Counter*> routed;
  for (int l : {0, 2}) {
    for (int e = 0; e < kExperts; ++e) {
      const std::string le = "layer=\"" + std::to_string(l) + "\",expert=\"" + std::to_string(e) + "\"";
      routed.push_back(r.counter("sluice_expert_routed_total", "r", le));
      routed.back()->add(cell(l, e) + 1);
      if (l == 2 && e == 3) continue;  // a cell with no per-expert series
      r.gauge("sluice_expert_resident", "r", le)->set((l + e) % 2);
      r.gauge("sluice_expert_chosen", "c", le + ",readiness=\"ready\"")->set(cell(l, e) + 2);
      r.gauge("sluice_expert_chosen", "c", le + ",readiness=\"late\"")->set(cell(l, e) + 3);
      r.gauge("sluice_expert_chosen", "c", le + ",readiness=\"missed\"")->set(cell(l, e) + 4);
      r.gauge("sluice_expert_predicted", "p", le + ",routed=\"yes\"")->set(cell(l, e) + 5);
      r.gauge("sluice_expert_predicted", "p", le + ",routed=\"no\"")->set(cell(l, e) + 6);
    }
    r.gauge("sluice_experts_resident", "r", "layer=\"" + std::to_string(l) + "\"")->set(l + 1);
  }
  r.gauge("sluice_expert_resident", "r", "layer=\"9\",expert=\"0\"")->set(7);  // beyond n_layer: no cell
  r.gauge("sluice_expert_resident", "r", "expert=\"0\",layer=\"0\"")->set(7);  // not the engine's label order
  for (int i = 0; i < 50; ++i) r.gauge("sluice_other", "o", "i=\"" + std::to_string(i) + "\"")->set(i);
  r.gauge("sluice_weight_read_bytes", "w", "tier=\"host\"")->set(4096);
  r.counter("sluice_some_bytes_total", "b", "x=\"1\"")->add(8);
  StatsFeed feed(r, /*min_window_s=*/0.0);
  const std::string model = R"({"n_layer": 3, "n_expert": 5})";
  feed.snapshot(model);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (Counter* c : routed) c->add(50);
  const json j = feed.snapshot(model);
  const double w = j["rate_window_s"].get<double>();
  ASSERT_GT(w, 0.0);
  const json& ex = j["experts"];
  EXPECT_EQ(ex["n_layer"], kLayers);
  EXPECT_EQ(ex["n_expert"], kExperts);
  const json& pe = ex["per_expert"];
  for (int l = 0; l < kLayers; ++l) {
    SCOPED_TRACE(l);
    if (l == 1) {
      EXPECT_TRUE(ex["routed"][l].is_null());
      EXPECT_TRUE(ex["routed_per_s"][l].is_null());
      for (const char* k : {"resident", "ready", "late", "missed", "predicted", "predicted_chosen"})
        EXPECT_TRUE(pe[k][l].is_null()) << k;
      continue;
    }
    for (int e = 0; e < kExperts; ++e) {
      SCOPED_TRACE(e);
      const double c = cell(l, e);
      const bool none = l == 2 && e == 3;
      EXPECT_EQ(ex["routed"][l][e].get<double>(), c + 51);
      EXPECT_NEAR(ex["routed_per_s"][l][e].get<double>(), 50 / w, 1e-6 * 50 / w);
      EXPECT_EQ(pe["resident"][l][e].get<double>(), none ? 0.0 : (l + e) % 2);
      EXPECT_EQ(pe["ready"][l][e].get<double>(), none ? 0.0 : c + 2);
      EXPECT_EQ(pe["late"][l][e].get<double>(), none ? 0.0 : c + 3);
      EXPECT_EQ(pe["missed"][l][e].get<double>(), none ? 0.0 : c + 4);
      EXPECT_EQ(pe["predicted_chosen"][l][e].get<double>(), none ? 0.0 : c + 5);
      EXPECT_EQ(pe["predicted"][l][e].get<double>(), none ? 0.0 : 2 * c + 11);
    }
  }
  ASSERT_EQ(ex["layers"].size(), 2u);
  EXPECT_EQ(ex["layers"][1]["layer"], 2);
  EXPECT_EQ(ex["layers"][1]["resident"], 3);
  for (const char* k : {"sluice_expert_routed_total", "sluice_expert_resident", "sluice_expert_chosen",
                        "sluice_expert_predicted"})
    EXPECT_FALSE(j["metrics"].contains(k)) << k;
  EXPECT_EQ(j["metrics"]["sluice_other"].size(), 50u);
  ASSERT_EQ(j["legs"].size(), 2u) << j["legs"].dump();
  EXPECT_EQ(j["legs"][0]["leg"], "sluice_some_bytes_total");
  EXPECT_EQ(j["legs"][0]["labels"]["x"], "1");
  EXPECT_EQ(j["legs"][1]["leg"], "ram -> compute (layers)");
  EXPECT_EQ(j["legs"][1]["bytes"], 4096);
}

// The routed counters' rates are kept by cell: a cell counts from 0 when the
// sample it is compared with had no cells yet (the model was still loading),
// and two cells with the same count keep their own rates.
TEST(StatsFeed, RoutedRatesByCellStartFromZeroBeforeTheModelIsKnown) {
  MetricRegistry r;
  Counter* a = r.counter("sluice_expert_routed_total", "r", "layer=\"0\",expert=\"0\"");
  Counter* b = r.counter("sluice_expert_routed_total", "r", "layer=\"0\",expert=\"1\"");
  a->add(10);
  b->add(10);
  StatsFeed feed(r, /*min_window_s=*/0.0);
  const json loading = feed.snapshot("");  // no model yet: no cells
  EXPECT_FALSE(loading.contains("experts"));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  a->add(30);
  const std::string model = R"({"n_layer": 1, "n_expert": 2})";
  json j = feed.snapshot(model);
  double w = j["rate_window_s"].get<double>();
  ASSERT_GT(w, 0.0);
  EXPECT_NEAR(j["experts"]["routed_per_s"][0][0].get<double>(), 40 / w, 1e-6 * 40 / w);
  EXPECT_NEAR(j["experts"]["routed_per_s"][0][1].get<double>(), 10 / w, 1e-6 * 10 / w);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  b->add(5);
  j = feed.snapshot(model);
  w = j["rate_window_s"].get<double>();
  ASSERT_GT(w, 0.0);
  EXPECT_EQ(j["experts"]["routed_per_s"][0][0].get<double>(), 0.0);
  EXPECT_NEAR(j["experts"]["routed_per_s"][0][1].get<double>(), 5 / w, 1e-6 * 5 / w);
  EXPECT_EQ(j["experts"]["routed"][0][1].get<double>(), 15.0);
}

// A real engine on stories-moe behind the HTTP server, on a free port.
// (mem_budget_bytes > 0: the shipped stories-moe-f16 with its experts streamed.)
class LiveServer {
 public:
  explicit LiveServer(const std::string& api_key = "", uint64_t mem_budget_bytes = 0)
      : LiveServer(EngineConfig{.model_path = mem_budget_bytes > 0 ? testing::shipped_model_path("stories-moe-f16.gguf")
                                                                   : testing::model_path("stories-moe/stories-moe.gguf"),
                                .n_threads = 2, .max_batch_tokens = 64, .max_seqs = 4, .ctx_size = 256,
                                .mem_budget_bytes = mem_budget_bytes},
                   api_key) {}
  LiveServer(const EngineConfig& config, const std::string& api_key) {
    auto e = Engine::create(config);
    if (!e.ok()) {
      error_ = e.status().to_string();
      return;
    }
    http_ = std::make_unique<HttpServer>(ServerConfig{.port = 0, .api_key = api_key, .http_threads = 8}, global_metrics());
    if (!http_->bind().ok()) return;
    http_->start();
    ok_ = http_->set_engine(std::shared_ptr<Engine>(std::move(e).value()), std::nullopt).ok();
  }
  ~LiveServer() {
    if (http_) http_->shutdown(1);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", http_->port());
    c.set_read_timeout(20, 0);
    return c;
  }
  json stats(const httplib::Headers& h = {}) const {
    auto res = client().Get("/stats", h);
    if (!res || res->status != 200) return json();
    return json::parse(res->body, nullptr, false);
  }

 private:
  std::unique_ptr<HttpServer> http_;
  bool ok_ = false;
  std::string error_;
};

// The value of one series in Prometheus text.
double prometheus_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

TEST(StatsRoutes, PageAndStatsOfAMoeModelFollowItsRouting) {
  SKIP_UNLESS_EXISTS(testing::model_path("stories-moe/stories-moe.gguf"));
  LiveServer s;
  ASSERT_TRUE(s.ok()) << s.error();
  auto cli = s.client();

  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
  EXPECT_NE(page->body.find("<title>sluice"), std::string::npos);
  EXPECT_EQ(page->body.find("http://"), std::string::npos) << "the page must load nothing from elsewhere";
  EXPECT_EQ(page->body.find("https://"), std::string::npos) << "the page must load nothing from elsewhere";

  const json before = s.stats();
  ASSERT_TRUE(before.is_object());
  const json& m = before["model"];
  EXPECT_EQ(m["arch"], "llama");
  EXPECT_EQ(m["n_expert"], 16);
  EXPECT_EQ(m["n_expert_used"], 2);
  EXPECT_EQ(m["ctx"], 256);
  ASSERT_EQ(m["placement"]["layers"].size(), m["n_layer"].get<size_t>());
  EXPECT_EQ(m["placement"]["mode"], "resident");
  for (const auto& l : m["placement"]["layers"]) {
    EXPECT_EQ(l["tier"], "ram");
    EXPECT_GT(l["bytes"].get<double>(), 0);
    EXPECT_EQ(l["tiers"], json({{"ram", l["bytes"]}}));
  }
  EXPECT_GT(m["weight_types"].size(), 0u);
  const json& ex = before["experts"];
  ASSERT_EQ(ex["routed"].size(), m["n_layer"].get<size_t>());
  auto row_sums = [](const json& routed) {
    std::vector<double> sums;
    for (const auto& row : routed) {
      double t = 0;
      for (const auto& v : row) t += v.get<double>();
      sums.push_back(t);
    }
    return sums;
  };
  const auto sums0 = row_sums(ex["routed"]);

  auto res = cli.Post("/v1/completions",
                      R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json usage = json::parse(res->body)["usage"];
  const double n_prompt = usage["prompt_tokens"].get<double>(), n_gen = usage["completion_tokens"].get<double>();

  const json after = s.stats();
  const auto sums1 = row_sums(after["experts"]["routed"]);
  // Every token that went through the model was routed to 2 experts in every
  // layer: the tokens computed are the prompt and every generated token but
  // the last (sampled, never fed back).
  for (size_t l = 0; l < sums1.size(); ++l) {
    const double routed = sums1[l] - sums0[l];
    EXPECT_EQ(routed, 2 * (n_prompt + n_gen - 1)) << "layer " << l;
  }
  // The same numbers /metrics has.
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  const json again = s.stats();
  EXPECT_EQ(again["experts"]["routed"][1][3].get<double>(),
            prometheus_value(metrics->body, R"(sluice_expert_routed_total{layer="1",expert="3"})"));
  EXPECT_EQ(again["throughput"]["generated_tokens"].get<double>(),
            prometheus_value(metrics->body, "sluice_generated_tokens_total"));
  EXPECT_EQ(again["kv"]["blocks_total"].get<double>(), prometheus_value(metrics->body, "sluice_kv_blocks_total"));
  EXPECT_GE(again["latency"]["ttft_s"]["count"].get<double>(), 1);
  EXPECT_GT(again["latency"]["ttft_s"]["p50"].get<double>(), 0);
}

// Streamed experts: per layer and expert, whether it is in a slot and how
// its layer found it when chosen (ready, late, missed) and whether it was
// predicted; they add up to the per-layer figures, follow the routing, and
// are the numbers /metrics has.
TEST(StatsRoutes, StreamedExpertsArePerExpertInStatsAsInMetrics) {
  LiveServer s("", 1'500'000);
  ASSERT_TRUE(s.ok()) << s.error();
  auto cli = s.client();
  const json before = s.stats();
  ASSERT_TRUE(before.is_object());
  EXPECT_EQ(before["model"]["placement"]["mode"], "experts");
  // Each routed layer: its experts on disk (streamed into slots), the rest in RAM.
  for (const auto& l : before["model"]["placement"]["layers"]) {
    ASSERT_TRUE(l["moe"].get<bool>());
    const double ram = l["tiers"]["ram"], disk = l["tiers"]["disk"];
    EXPECT_GT(disk, ram);  // stories-moe: 2.4 MB of its 2.6 MB are experts
    EXPECT_GT(ram, 0);
    EXPECT_EQ(ram + disk, l["bytes"].get<double>());
    EXPECT_EQ(l["tier"], "disk");
  }
  const json& ex0 = before["experts"];
  ASSERT_TRUE(ex0.contains("per_expert")) << ex0.dump();
  const size_t n_layer = ex0["n_layer"], n_expert = ex0["n_expert"];
  for (const char* k : {"resident", "ready", "late", "missed", "predicted", "predicted_chosen"}) {
    ASSERT_EQ(ex0["per_expert"][k].size(), n_layer) << k;
    for (const auto& row : ex0["per_expert"][k]) ASSERT_EQ(row.size(), n_expert) << k;
  }

  auto res = cli.Post("/v1/completions",
                      R"({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true})",
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  // The engine publishes its last figures as it goes idle: wait for them to settle.
  json after = s.stats();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const json again = s.stats();
    const bool settled = again["experts"]["per_expert"] == after["experts"]["per_expert"] &&
                         again["experts"]["routed"] == after["experts"]["routed"];
    after = again;
    if (settled) break;
  }
  const json& ex = after["experts"];
  const json& pe = ex["per_expert"];
  auto at = [](const json& m, size_t l, size_t e) { return m[l][e].get<double>(); };
  std::map<size_t, json> layers;
  for (const auto& l : ex["layers"]) layers[l["layer"].get<size_t>()] = l;
  double resident_all = 0;
  for (size_t l = 0; l < n_layer; ++l) {
    double chosen = 0, ready = 0, hits = 0, resident = 0;
    for (size_t e = 0; e < n_expert; ++e) {
      const double c = at(pe["ready"], l, e) + at(pe["late"], l, e) + at(pe["missed"], l, e);
      const double c0 = at(ex0["per_expert"]["ready"], l, e) + at(ex0["per_expert"]["late"], l, e) +
                        at(ex0["per_expert"]["missed"], l, e);
      // Chosen in a step of the request exactly when tokens of it were routed to it.
      EXPECT_EQ(c > c0, at(ex["routed"], l, e) > at(ex0["routed"], l, e)) << "layer " << l << " expert " << e;
      EXPECT_LE(at(pe["predicted_chosen"], l, e), at(pe["predicted"], l, e));
      EXPECT_TRUE(at(pe["resident"], l, e) == 0 || at(pe["resident"], l, e) == 1);
      chosen += c;
      ready += at(pe["ready"], l, e);
      hits += at(pe["predicted_chosen"], l, e);
      resident += at(pe["resident"], l, e);
    }
    ASSERT_TRUE(layers.count(l)) << ex["layers"].dump();
    EXPECT_GT(chosen, 0) << "layer " << l;
    EXPECT_EQ(resident, layers[l]["resident"].get<double>()) << "layer " << l;
    EXPECT_NEAR(ready / chosen, layers[l]["hit_rate"].get<double>(), 1e-12) << "layer " << l;
    EXPECT_NEAR(hits / chosen, layers[l]["recall"].get<double>(), 1e-12) << "layer " << l;
    resident_all += resident;
  }
  EXPECT_GT(resident_all, 0);
  EXPECT_LE(resident_all, after["model"]["placement"]["experts"]["n_slots"].get<double>());
  // The same numbers /metrics has.
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (size_t e = 0; e < n_expert; ++e) {
    const std::string le = "layer=\"2\",expert=\"" + std::to_string(e) + "\"";
    EXPECT_EQ(at(pe["resident"], 2, e), prometheus_value(metrics->body, "sluice_expert_resident{" + le + "}"));
    EXPECT_EQ(at(pe["missed"], 2, e),
              prometheus_value(metrics->body, "sluice_expert_chosen{" + le + ",readiness=\"missed\"}"));
    EXPECT_EQ(at(pe["predicted_chosen"], 2, e),
              prometheus_value(metrics->body, "sluice_expert_predicted{" + le + ",routed=\"yes\"}"));
  }
  EXPECT_FALSE(after["metrics"].contains("sluice_expert_chosen"));  // only as the matrices above
}

TEST(StatsRoutes, StreamSendsSnapshotsAtTheIntervalAndRefusesBadOnes) {
  SKIP_UNLESS_EXISTS(testing::model_path("stories-moe/stories-moe.gguf"));
  LiveServer s;
  ASSERT_TRUE(s.ok()) << s.error();
  auto cli = s.client();
  std::string body;
  int events = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = cli.Get("/stats/stream?interval_ms=200", [&](const char* data, size_t n) {
    body.append(data, n);
    for (size_t at; (at = body.find("\n\n")) != std::string::npos; body.erase(0, at + 2)) {
      const std::string ev = body.substr(0, at);
      EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
      const json j = json::parse(ev.substr(6), nullptr, false);
      EXPECT_TRUE(j.is_object() && j.contains("kv") && j["model"]["n_expert"] == 16) << ev.substr(0, 200);
      ++events;
    }
    return events < 3;  // then hang up
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(events, 3);
  EXPECT_GE(took, 0.35);  // three events 200 ms apart
  for (const char* bad : {"0", "50", "abc", "20000", ""}) {
    auto r = cli.Get(std::string("/stats/stream?interval_ms=") + bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_NE(r->body.find("interval_ms"), std::string::npos);
  }
}

TEST(StatsRoutes, StatsNeedTheApiKeyButThePageDoesNot) {
  SKIP_UNLESS_EXISTS(testing::model_path("stories-moe/stories-moe.gguf"));
  LiveServer s("sekrit");
  ASSERT_TRUE(s.ok()) << s.error();
  auto cli = s.client();
  for (const char* path : {"/stats", "/stats/stream"}) {
    auto r = cli.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_NE(r->body.find("invalid_api_key"), std::string::npos);
    r = cli.Get(path, {{"Authorization", "Bearer wrong!"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
  }
  const json ok = s.stats({{"Authorization", "Bearer sekrit"}});
  EXPECT_TRUE(ok.is_object() && ok.contains("model")) << ok.dump();
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->body.find("sekrit"), std::string::npos);
}

// The fluid split moves the placement while serving: the page's model JSON
// follows it (HttpServer::model_json refreshes when the placement's version
// changes). stories260K under a budget that keeps 2 of its 5 layers resident
// beside a 10-block KV pool; no promotion comes back within the test.
TEST(StatsRoutes, TheModelsPlacementFollowsTheFluidSplit) {
  static const plan::Calibration slow{.n_threads = 2, .mem_read_gbps = 10, .matmul_tflops = 0.0005,
                                      .disk_read_gbps = 1};
  LiveServer s(EngineConfig{.model_path = testing::shipped_model_path("stories260K.gguf"),
                            .n_threads = 2,
                            .max_batch_tokens = 256,
                            .max_seqs = 8,
                            .kv_budget_bytes = 10 * 20480,
                            .mem_budget_bytes = 1290000,
                            .fluid_split = true,
                            .fluid_hold_steps = int64_t{1} << 40,
                            .calibration = &slow},
               "");
  ASSERT_TRUE(s.ok()) << s.error();
  auto disk_layers = [](const json& st) {
    int n = 0;
    for (const auto& l : st["model"]["placement"]["layers"]) n += l["tier"] == "disk";
    return n;
  };
  const json before = s.stats();
  const int disk_before = disk_layers(before);
  EXPECT_EQ(before["kv"]["fluid_units"].get<double>(), 0);
  std::vector<std::thread> burst;
  for (int i = 0; i < 8; ++i)
    burst.emplace_back([&s, i] {
      auto cli = s.client();
      const std::string body = R"({"prompt": "Once upon a time )" + std::string(static_cast<size_t>(i), 'x') +
                               R"(", "max_tokens": 48, "temperature": 0, "ignore_eos": true})";
      auto res = cli.Post("/v1/completions", body, "application/json");
      EXPECT_TRUE(res && res->status == 200);
    });
  for (std::thread& t : burst) t.join();
  const json after = s.stats();
  const double units = after["kv"]["fluid_units"].get<double>();
  EXPECT_GE(units, 1) << after["kv"].dump();
  EXPECT_EQ(disk_layers(after), disk_before + static_cast<int>(units)) << after["model"]["placement"].dump();
}

}  // namespace
}  // namespace sluice::server
