// StatsFeed (the registry as JSON, with rates) and the live-view routes of
// HttpServer: GET / (the page), GET /stats and /stats/stream, in front of a
// real Engine on stories-moe (routed counts per layer and expert) with and
// without an API key.
#include "server/stats_feed.h"

#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "base/test_data.h"
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

// A real engine on stories-moe behind the HTTP server, on a free port.
class LiveServer {
 public:
  explicit LiveServer(const std::string& api_key = "") {
    auto e = Engine::create({.model_path = testing::model_path("stories-moe/stories-moe.gguf"), .n_threads = 2,
                             .max_batch_tokens = 64, .max_seqs = 4, .ctx_size = 256});
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

}  // namespace
}  // namespace sluice::server
