// HttpServer's route table: the dispatcher serves every row of it (and nothing
// else), and request metrics are labelled from it. No engine: the routes answer
// as a server that is still loading does, or ask for the API key.
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "base/metrics.h"
#include "server/http_server.h"

namespace sluice::server {
namespace {

TEST(Routes, EveryRowIsServedUnderItsMethodAndNothingElseIs) {
  HttpServer http(ServerConfig{.port = 0, .api_key = "key", .http_threads = 4}, global_metrics());
  ASSERT_TRUE(http.bind().ok());
  http.start();
  httplib::Client c("127.0.0.1", http.port());
  c.set_read_timeout(10, 0);
  for (const HttpServer::Route& r : HttpServer::routes()) {
    std::string path = r.path;
    if (const size_t brace = path.find('{'); brace != std::string::npos) path = path.substr(0, brace) + "m";
    const std::string method = r.method;
    ASSERT_TRUE(method == "GET" || method == "POST") << method;
    auto res = method == "GET" ? c.Get(path) : c.Post(path, "{}", "application/json");
    ASSERT_TRUE(res) << method << " " << path;
    EXPECT_NE(res->status, 404) << method << " " << path << ": " << res->body;
    // The same path under the other method is outside the table.
    auto other = method == "GET" ? c.Post(path, "{}", "application/json") : c.Get(path);
    ASSERT_TRUE(other) << path;
    EXPECT_EQ(other->status, 404) << path;
    EXPECT_NE(other->body.find("unknown_url"), std::string::npos) << other->body;
  }
  auto unknown = c.Get("/v2/models");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  http.shutdown(0);
}

TEST(Routes, EachMethodAndPathIsInTheTableOnce) {
  std::set<std::string> seen;
  for (const HttpServer::Route& r : HttpServer::routes()) {
    EXPECT_TRUE(seen.insert(std::string(r.method) + " " + r.path).second) << r.method << " " << r.path;
    EXPECT_NE(std::string(r.description), "") << r.path;
  }
  EXPECT_GE(seen.size(), 9u);
}

TEST(Routes, MetricLabelsComeFromTheTable) {
  EXPECT_EQ(HttpServer::route_label("/v1/completions"), "completions");
  EXPECT_EQ(HttpServer::route_label("/v1/chat/completions"), "chat.completions");
  EXPECT_EQ(HttpServer::route_label("/v1/models"), "models");
  EXPECT_EQ(HttpServer::route_label("/v1/models/lora-a"), "models");
  EXPECT_EQ(HttpServer::route_label("/health"), "other");
  EXPECT_EQ(HttpServer::route_label("/v1/nothing"), "other");
}

}  // namespace
}  // namespace sluice::server
