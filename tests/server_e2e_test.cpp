// End-to-end tests of `sluice serve` on a loopback port with stories260K:
//   ServerE2e.RawHttp...     C++ client (cpp-httplib): greedy == `sluice run`, the
//                            error table, still serving after it, SIGTERM exit 0
//   ServerE2e.OpenAiNodeSdk  tests/server_e2e/e2e.mjs with the official `openai`
//                            package (scripts/install-deps installs it; missing, the
//                            test fails): streaming, chat, burst of 64,
//                            disconnects, drain, 429, and the README's curl examples
//   ServerE2e.ToolCalls...   tests/server_e2e/tool_calls.mjs: tool calls in the four
//                            formats through the SDK, against sluice_fixture_server
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "server_process.h"

namespace sluice {
namespace {

using json = nlohmann::json;
using testing::model_path;
using testing::ServerProcess;

const std::string kModel = testing::shipped_model_path("stories260K.gguf");
const std::string kTemplate = std::string(SLUICE_SOURCE_DIR) + "/src/server/templates/qwen2.jinja";
const std::string kE2eDir = std::string(SLUICE_SOURCE_DIR) + "/tests/server_e2e";

// Runs a shell command; returns exit code and output (stderr too, unless the
// command redirects it).
std::pair<int, std::string> shell(const std::string& cmd, bool with_stderr = true) {
  std::string out;
  FILE* p = popen((with_stderr ? cmd + " 2>&1" : cmd).c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// `sluice run --json` greedy reference: {"tokens", "text", "finish_reason"}.
json greedy_reference(int n) {
  auto [code, out] = shell(std::string(SLUICE_BINARY) + " run -m " + kModel + " -p 'Once upon a time' -n " +
                           std::to_string(n) + " --temp 0 --json 2>/dev/null", /*with_stderr=*/false);
  EXPECT_EQ(code, 0) << out;
  return json::parse(out.substr(0, out.find('\n')));
}

httplib::Result post(httplib::Client& c, const std::string& path, const std::string& body, const std::string& key = "") {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return c.Post(path.c_str(), h, body, "application/json");
}

void expect_error(const httplib::Result& r, int status, const std::string& code, const std::string& what) {
  ASSERT_TRUE(r) << what << ": no response";
  EXPECT_EQ(r->status, status) << what << ": " << r->body;
  const json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << what << ": " << r->body;
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << what;
  EXPECT_EQ(j["error"]["code"], code) << what << ": " << r->body;
}

TEST(ServerE2e, RawHttpGreedyMatchesRunAndErrorsHoldTheirStatus) {
  const json ref = greedy_reference(48);
  ServerProcess srv(kModel, {"--api-key", "k", "--chat-template", kTemplate, "--max-body-bytes", "32768"});
  ASSERT_NE(srv.port(), 0) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);

  auto models = c.Get("/v1/models", {{"Authorization", "Bearer k"}});
  ASSERT_TRUE(models && models->status == 200);
  const std::string id = json::parse(models->body)["data"][0]["id"];
  const json greedy = {{"model", id}, {"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0},
                       {"return_token_ids", true}};
  auto check_greedy = [&](const std::string& when) {
    auto r = post(c, "/v1/completions", greedy.dump(), "k");
    ASSERT_TRUE(r && r->status == 200) << when << ": " << (r ? r->body : "no response");
    const json j = json::parse(r->body);
    EXPECT_EQ(j["choices"][0]["token_ids"], ref["tokens"]) << when;
    EXPECT_EQ(j["choices"][0]["text"], ref["text"]) << when;
  };
  check_greedy("first request");

  json wrong_type = greedy;
  wrong_type["max_tokens"] = "many";
  json unknown = greedy;
  unknown["model"] = "no-such-model";
  json long_prompt = greedy;
  std::string text;
  for (int i = 0; i < 700; ++i) text += "Once upon a time ";
  long_prompt["prompt"] = text;
  json absurd = greedy;
  absurd["max_tokens"] = 2000000000;
  json oversized = greedy;
  oversized["prompt"] = std::string(40000, 'x');
  expect_error(post(c, "/v1/completions", "{\"model\": ", "k"), 400, "invalid_json", "malformed JSON");
  expect_error(post(c, "/v1/completions", wrong_type.dump(), "k"), 400, "invalid_type", "wrong type");
  expect_error(post(c, "/v1/completions", unknown.dump(), "k"), 404, "model_not_found", "unknown model");
  expect_error(post(c, "/v1/completions", long_prompt.dump(), "k"), 400, "context_length_exceeded", "long prompt");
  expect_error(post(c, "/v1/completions", absurd.dump(), "k"), 400, "context_length_exceeded", "absurd max_tokens");
  expect_error(post(c, "/v1/completions", oversized.dump(), "k"), 413, "request_too_large", "oversized body");
  expect_error(post(c, "/v1/completions", greedy.dump()), 401, "invalid_api_key", "missing key");
  expect_error(post(c, "/v1/completions", greedy.dump(), "wrong"), 401, "invalid_api_key", "wrong key");
  expect_error(c.Get("/v1/unknown"), 404, "unknown_url", "unknown route");
  check_greedy("after the hostile requests");

  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("sluice_server_requests_total{endpoint=\"completions\",outcome=\"too_large\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

// No -m: the shipped stories260K, named in one line on stderr, answers as `run` does.
TEST(ServerE2e, WithoutAModelServesTheShippedOne) {
  const json ref = greedy_reference(32);
  ServerProcess srv("", {});  // no -m: the shipped default model
  ASSERT_NE(srv.port(), 0) << srv.log();
  EXPECT_EQ(srv.log().rfind("[sluice] no model given: using the shipped stories260K (" + kModel + ")\n", 0), 0u)
      << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  const json greedy = {{"model", "llama"}, {"prompt", "Once upon a time"}, {"max_tokens", 32}, {"temperature", 0},
                       {"return_token_ids", true}};
  auto r = post(c, "/v1/completions", greedy.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["token_ids"], ref["tokens"]);
  EXPECT_EQ(j["choices"][0]["text"], ref["text"]);
  EXPECT_NE(j["choices"][0]["text"].get<std::string>().find("there was a little girl named Lily"), std::string::npos)
      << r->body;
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

TEST(ServerE2e, TooManyQueuedRequestsGet429AndServingContinues) {
  SKIP_UNLESS_EXISTS(kModel);
  ServerProcess srv(kModel, {"--max-seqs", "1", "--max-queued", "1"});
  ASSERT_NE(srv.port(), 0) << srv.log();
  // Long enough that the first request is still running when the others arrive.
  const json body = {{"model", "llama"}, {"prompt", "Once"}, {"max_tokens", 450}, {"temperature", 0}, {"ignore_eos", true}};
  std::vector<std::thread> threads;
  std::vector<int> status(6, 0);
  for (size_t i = 0; i < status.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", srv.port());
      c.set_read_timeout(60);
      auto r = post(c, "/v1/completions", body.dump());
      status[i] = r ? r->status : -1;
      if (r && r->status == 429) expect_error(r, 429, "rate_limit_exceeded", "queue full");
    });
  }
  for (auto& t : threads) t.join();
  const long n429 = std::count(status.begin(), status.end(), 429), n200 = std::count(status.begin(), status.end(), 200);
  EXPECT_GE(n429, 1);
  EXPECT_GE(n200, 1);
  EXPECT_EQ(n429 + n200, static_cast<long>(status.size()));
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  auto r = post(c, "/v1/completions", body.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(srv.stop(SIGINT), 0) << srv.log();
}

TEST(ServerE2e, SpeculativeServingKeepsGreedyOutputAndCountsDrafts) {
  const json ref = greedy_reference(48);
  ServerProcess srv(kModel, {"--spec", "lookup", "--draft-max", "4"});
  ASSERT_NE(srv.port(), 0) << srv.log();
  EXPECT_NE(srv.log().find("speculative decoding: prompt lookup"), std::string::npos) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  const json greedy = {{"model", "llama"}, {"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0},
                       {"return_token_ids", true}};
  auto r = post(c, "/v1/completions", greedy.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  EXPECT_EQ(json::parse(r->body)["choices"][0]["token_ids"], ref["tokens"]);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  for (const char* name : {"sluice_spec_draft_tokens_total", "sluice_spec_accepted_tokens_total",
                           "sluice_spec_acceptance_rate", "sluice_spec_tokens_per_pass"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

// `sluice run --lora FILE --json` greedy reference with an adapter, no EOS stop.
json greedy_with_lora(const std::string& lora, int n) {
  auto [code, out] = shell(std::string(SLUICE_BINARY) + " run -m " + kModel + " --lora " + lora +
                               " -p 'Once upon a time' -n " + std::to_string(n) + " --temp 0 --ignore-eos --json 2>/dev/null",
                           /*with_stderr=*/false);
  EXPECT_EQ(code, 0) << out;
  return json::parse(out.substr(0, out.find('\n')));
}

// Two adapters served beside the base: /v1/models lists all three, and
// requests on different adapters (and on none) running at the same time each
// get what `sluice run` gives with their adapter alone.
TEST(ServerE2e, LoraAdaptersArePickedPerRequestAndShareSteps) {
  // The long request's tokens: as many as stories260K's 512 positions allow
  // (300 finished before the three short ones did, once in a dozen runs).
  constexpr int kLongTokens = 480;
  const std::string trained = model_path("stories260K-lora/lora-trained.gguf");
  const std::string init = model_path("stories260K-lora/lora-init.gguf");
  SKIP_UNLESS_EXISTS(kModel);
  SKIP_UNLESS_EXISTS(trained);
  const json ref_trained = greedy_with_lora(trained, kLongTokens), ref_init = greedy_with_lora(init, 32);
  const json ref_base = greedy_with_lora(trained + ":0", 32);  // scale 0: the base model's tokens
  ServerProcess srv(kModel, {"--lora", trained, "--lora", init + ":1.0"});
  ASSERT_NE(srv.port(), 0) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const json data = json::parse(models->body)["data"];
  ASSERT_EQ(data.size(), 3u) << models->body;
  const std::string base = data[0]["id"];
  EXPECT_EQ(data[1]["id"], "lora-trained");
  EXPECT_EQ(data[2]["id"], "lora-init");
  EXPECT_EQ(data[2]["parent"], base);
  auto one = c.Get("/v1/models/lora-init");
  ASSERT_TRUE(one && one->status == 200);
  EXPECT_EQ(json::parse(one->body)["id"], "lora-init");

  // The long request on one adapter is still generating when the short ones
  // (another adapter; the base, by its id and by an empty model) finish.
  auto body = [](const std::string& model, int n) {
    return json{{"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", n}, {"temperature", 0},
                {"ignore_eos", true}, {"return_token_ids", true}}.dump();
  };
  // One round: the long request, then the three short ones at once, each on
  // its own connection. Whether the long one is still running when the short
  // ones are done is a matter of timing on a loaded machine, so the round is
  // tried up to three times; a server that ran requests one after another
  // would never overlap, and every round checks every token.
  auto round = [&]() -> bool {
    json long_reply;
    std::atomic<bool> long_done{false};
    std::thread long_request([&] {
      httplib::Client lc("127.0.0.1", srv.port());
      lc.set_read_timeout(60);
      auto r = post(lc, "/v1/completions", body("lora-trained", kLongTokens));
      if (r && r->status == 200) long_reply = json::parse(r->body);
      long_done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::array<std::pair<std::string, json>, 3> shorts{
        {{"lora-init", ref_init}, {base, ref_base}, {"", ref_base}}};
    std::array<json, 3> replies;
    std::vector<std::thread> short_requests;
    for (size_t i = 0; i < shorts.size(); ++i)
      short_requests.emplace_back([&, i] {
        httplib::Client sc("127.0.0.1", srv.port());
        sc.set_read_timeout(60);
        auto r = post(sc, "/v1/completions", body(shorts[i].first, 32));
        if (r && r->status == 200) replies[i] = json::parse(r->body);
      });
    for (auto& t : short_requests) t.join();
    const bool overlapped = !long_done.load();
    long_request.join();
    for (size_t i = 0; i < shorts.size(); ++i) {
      const auto& [model, ref] = shorts[i];
      EXPECT_TRUE(replies[i].is_object()) << model << ": no reply\n" << srv.log();
      if (!replies[i].is_object()) continue;
      EXPECT_EQ(replies[i]["choices"][0]["token_ids"], ref["tokens"]) << model;
      EXPECT_EQ(replies[i]["model"], model.empty() ? base : model);
    }
    EXPECT_TRUE(long_reply.is_object()) << srv.log();
    if (long_reply.is_object()) {
      EXPECT_EQ(long_reply["choices"][0]["token_ids"], ref_trained["tokens"]);
    }
    return overlapped;
  };
  bool overlapped = false;
  for (int attempt = 0; attempt < 3 && !overlapped && !HasFailure(); ++attempt) overlapped = round();
  EXPECT_TRUE(overlapped) << "in three tries the adapters' requests never ran at the same time";
  EXPECT_NE(ref_trained["tokens"], ref_base["tokens"]);

  json unknown = json::parse(body("lora-nope", 4));
  auto r = post(c, "/v1/completions", unknown.dump());
  expect_error(r, 404, "model_not_found", "unknown adapter");
  EXPECT_NE(r->body.find("'lora-trained', 'lora-init'"), std::string::npos) << r->body;
  expect_error(c.Get("/v1/models/lora-nope"), 404, "model_not_found", "unknown model id");
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

// Why the Node SDK tests cannot run ("" when they can): node and the openai
// package (scripts/install-deps puts it in tests/server_e2e/node_modules/, from
// package-lock.json) must be there; nothing is installed at test time. Missing
// pieces fail the test, unless SLUICE_SKIP_NODE_TESTS=1 asks to skip them.
std::string missing_node_sdk() {
  if (shell("command -v node").first != 0) return "node is not installed (run scripts/install-deps)";
  if (shell("test -f " + kE2eDir + "/node_modules/openai/package.json").first != 0)
    return "the openai npm package is not in " + kE2eDir + "/node_modules (run scripts/install-deps)";
  return "";
}

#define REQUIRE_NODE_SDK()                                                                        \
  do {                                                                                            \
    if (const std::string why = missing_node_sdk(); !why.empty()) {                               \
      const char* skip = std::getenv("SLUICE_SKIP_NODE_TESTS");                                   \
      if (skip && std::string(skip) == "1") GTEST_SKIP() << why << " (SLUICE_SKIP_NODE_TESTS=1)"; \
      FAIL() << why << "; SLUICE_SKIP_NODE_TESTS=1 skips the Node SDK tests";                     \
    }                                                                                             \
  } while (0)

TEST(ServerE2e, OpenAiNodeSdk) {
  SKIP_UNLESS_EXISTS(kModel);
  REQUIRE_NODE_SDK();
  const json ref = greedy_reference(64);
  ASSERT_EQ(ref["finish_reason"], "length");
  const std::string ref_path = ::testing::TempDir() + "/sluice_e2e_ref_" + std::to_string(getpid()) + ".json";
  std::ofstream(ref_path) << ref.dump();
  const std::string cmd = "cd " + kE2eDir + " && SLUICE_BINARY='" + SLUICE_BINARY + "' SLUICE_MODEL='" + kModel +
                          "' SLUICE_TEMPLATE='" + kTemplate + "' SLUICE_README='" + kE2eDir +
                          "/readme_examples.sh' SLUICE_REF_FILE='" + ref_path + "' timeout 330 node e2e.mjs";
  auto [code, out] = shell(cmd);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("E2E PASSED"), std::string::npos) << out;
  std::printf("%s", out.substr(out.find_last_of('\n', out.size() - 2) + 1).c_str());
}

// Tool calls in each of the four formats through the SDK, against
// sluice_fixture_server (the real server and request path, a fixed model output).
TEST(ServerE2e, ToolCallsThroughTheNodeSdkForEachFormat) {
  const std::string templates = testing::shared_dir() + "/chat-templates";
  SKIP_UNLESS_EXISTS(templates + "/expected.json");
  REQUIRE_NODE_SDK();
  const std::string cmd = "cd " + kE2eDir + " && SLUICE_FIXTURE_SERVER='" + SLUICE_FIXTURE_SERVER +
                          "' SLUICE_TOKENIZER='" + kModel + "' SLUICE_TEMPLATES='" + templates +
                          "' timeout 150 node tool_calls.mjs";
  auto [code, out] = shell(cmd);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("TOOL CALLS E2E PASSED"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace sluice
