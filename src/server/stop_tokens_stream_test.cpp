// Stop tokens on the server's request path, streamed and not: a request's
// stop_token_ids end a choice exactly as the engine's StopCondition decides,
// and the stop token is not part of the choice (not in its token ids, its text
// or completion_tokens). The engine runs the shipped stories260K; the
// reference is the same request without stop tokens.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/metrics.h"
#include "base/test_data.h"
#include "server/http_server.h"
#include "sluice/engine.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

struct Reply {
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;
  int64_t completion_tokens = -1;
};

class StopTokensStream : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model = testing::shipped_model_path("stories260K.gguf");
    SKIP_UNLESS_EXISTS(model);
    auto engine = Engine::create(EngineConfig{.model_path = model, .n_threads = 1, .max_seqs = 4, .ctx_size = 256});
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    http_ = std::make_unique<HttpServer>(ServerConfig{.port = 0, .http_threads = 2}, metrics_);
    ASSERT_TRUE(http_->bind().ok());
    http_->start();
    ASSERT_TRUE(http_->set_engine(std::shared_ptr<Engine>(std::move(engine).value()), std::nullopt).ok());
  }
  void TearDown() override {
    if (http_) http_->shutdown(1);
  }

  // POST /v1/completions greedy from "Once upon a time", ignoring EOS, with
  // the given stop token ids; streamed chunks are put together.
  Reply complete(const std::vector<int32_t>& stop_ids, bool stream, int* status = nullptr) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24},   {"temperature", 0},
                 {"ignore_eos", true},           {"stream", stream},   {"return_token_ids", true}};
    if (!stop_ids.empty()) body["stop_token_ids"] = stop_ids;
    if (stream) body["stream_options"] = {{"include_usage", true}};
    httplib::Client cli("127.0.0.1", http_->port());
    cli.set_read_timeout(30, 0);
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    Reply r;
    if (!res) {
      ADD_FAILURE() << "no response";
      return r;
    }
    if (status) *status = res->status;
    if (res->status != 200) return r;
    std::vector<json> chunks;
    if (stream) {
      std::istringstream lines(res->body);
      for (std::string line; std::getline(lines, line);)
        if (line.rfind("data: ", 0) == 0 && line != "data: [DONE]") chunks.push_back(json::parse(line.substr(6)));
    } else {
      chunks.push_back(json::parse(res->body));
    }
    for (const json& c : chunks) {
      if (c.contains("usage") && c["usage"].is_object()) r.completion_tokens = c["usage"]["completion_tokens"];
      if (!c.contains("choices") || c["choices"].empty()) continue;
      const json& choice = c["choices"][0];
      for (int32_t id : choice["token_ids"]) r.token_ids.push_back(id);
      r.text += choice["text"].get<std::string>();
      if (choice["finish_reason"].is_string()) r.finish_reason = choice["finish_reason"];
    }
    return r;
  }

  MetricRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(StopTokensStream, RequestStopTokensEndTheChoiceAndAreLeftOut) {
  const Reply full = complete({}, /*stream=*/false);
  ASSERT_EQ(full.token_ids.size(), 24u);
  EXPECT_EQ(full.finish_reason, "length");
  // The stop token: the 6th generated one, first seen there.
  size_t at = 5;
  while (at < full.token_ids.size() &&
         std::find(full.token_ids.begin(), full.token_ids.begin() + static_cast<long>(at), full.token_ids[at]) !=
             full.token_ids.begin() + static_cast<long>(at))
    ++at;
  ASSERT_LT(at, full.token_ids.size()) << "no token of the greedy output is new after the 5th";
  const int32_t stop_id = full.token_ids[at];
  const std::vector<int32_t> before(full.token_ids.begin(), full.token_ids.begin() + static_cast<long>(at));

  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    const Reply r = complete({stop_id, 0}, stream);
    EXPECT_EQ(r.token_ids, before);
    EXPECT_EQ(r.finish_reason, "stop");
    EXPECT_EQ(r.completion_tokens, static_cast<int64_t>(before.size()));
    // The text is that of the tokens before the stop token: a prefix of the full text.
    EXPECT_EQ(full.text.rfind(r.text, 0), 0u) << r.text;
    EXPECT_LT(r.text.size(), full.text.size());
  }
}

TEST_F(StopTokensStream, StopTokenIdsOutsideTheVocabularyAre400) {
  int status = 0;
  complete({1 << 20}, /*stream=*/true, &status);
  EXPECT_EQ(status, 400);
  complete({-1}, /*stream=*/false, &status);
  EXPECT_EQ(status, 400);
}

}  // namespace
}  // namespace sluice::server
