// Tool-call markers as tokens, through the server's request path: for every
// format, a stand-in model emits a fixed output as token ids of a vocabulary
// that holds the format's markers either as control tokens (as GGUFs of Llama
// 3.1, Mistral v3 and DeepSeek V3/R1 type them) or as user-defined tokens (as
// Qwen 2.5's <tool_call>). Event texts come from the engine's own OutputText,
// stop-string hold-back included, so the server sees what `sluice serve` would.
// Plain and streamed chat completions must return the calls, and no control
// token's text may reach content.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/metrics.h"
#include "engine/output_text.h"
#include "server/http_server.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

// SPM vocabulary: <unk>, <s>, </s>, U+2581, the 256 byte tokens, then `markers`
// typed `type`. Any text encodes (byte fallback), markers as one token each.
std::unique_ptr<Tokenizer> marker_vocab(const std::vector<std::string>& markers, TokenType type) {
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::str("llama"));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::boolean(false));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::boolean(false));
  md.set("tokenizer.ggml.bos_token_id", MetaValue::u32(1));
  md.set("tokenizer.ggml.eos_token_id", MetaValue::u32(2));
  MetaArray texts, scores, types;
  texts.elem_type = GgufType::kString;
  scores.elem_type = GgufType::kFloat32;
  types.elem_type = GgufType::kInt32;
  auto add = [&](std::string text, TokenType t) {
    texts.strings.push_back(std::move(text));
    scores.floats.push_back(0.0f);
    types.ints.push_back(static_cast<int64_t>(t));
  };
  add("<unk>", TokenType::kUnknown);
  add("<s>", TokenType::kControl);
  add("</s>", TokenType::kControl);
  add("\xE2\x96\x81", TokenType::kNormal);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", TokenType::kByte);
  for (const std::string& m : markers) add(m, type);
  md.set("tokenizer.ggml.tokens", MetaValue::array(texts));
  md.set("tokenizer.ggml.scores", MetaValue::array(scores));
  md.set("tokenizer.ggml.token_type", MetaValue::array(types));
  auto tok = Tokenizer::from_metadata(md);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// A stand-in model that "generates" fixed token ids. Each event's text is what
// the engine would send for that token (OutputText with the request's stop
// strings); then the end (stop) with the held-back text.
class TokenFixtureService final : public GenerationService {
 public:
  TokenFixtureService(std::unique_ptr<Tokenizer> tok, std::vector<int32_t> ids) : tok_(std::move(tok)), ids_(std::move(ids)) {}
  StatusOr<RequestId> submit(Request request, EventCallback on_event) override {
    const RequestId id = next_id_++;
    OutputText text(*tok_, request.stop_strings);
    bool stopped = false;
    for (const int32_t token : ids_) {  // tokens after a stop string still come, as text-less events
      TokenEvent e{.request = id, .index = 0, .token = token};
      stopped = text.push(token, &e.text);
      on_event(e);
    }
    TokenEvent last{.request = id, .index = 0, .finished = true, .finish_reason = FinishReason::kStop};
    last.text = text.finish(/*release=*/!stopped);
    last.timings = RequestTimings{.n_prompt = static_cast<int64_t>(request.prompt.size()),
                                  .n_generated = static_cast<int64_t>(ids_.size())};
    on_event(last);
    return id;
  }
  void abort(RequestId) override {}
  bool drain(double) override { return true; }
  const Tokenizer& tokenizer() const override { return *tok_; }
  const std::string& model_name() const override { return name_; }
  int64_t ctx_size() const override { return 4096; }

 private:
  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> ids_;
  std::string name_ = "fixture";
  RequestId next_id_ = 1;
};

struct Case {
  ToolCallFormat format;
  std::vector<std::string> markers;
  std::string output;            // what the model writes, markers included
  std::string content;           // the content a successful parse leaves
  std::vector<std::string> names;  // the calls' function names
  std::vector<json> arguments;     // and their arguments
};

std::vector<Case> cases() {
  return {
      {ToolCallFormat::kLlama3,
       {"<|python_tag|>"},
       "Let me look that up.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       "Let me look that up.",
       {"get_weather"},
       {{{"city", "Paris"}}}},
      {ToolCallFormat::kHermes,
       {"<tool_call>", "</tool_call>"},
       "I'll check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
       "I'll check both cities.",
       {"get_weather", "get_weather"},
       {{{"city", "Paris"}}, {{"city", "Oslo"}}}},
      {ToolCallFormat::kMistral,
       {"[TOOL_CALLS]"},
       "Calling it now.[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"timezone\": \"UTC\"}, \"id\": \"a1b2c3d4e\"}]",
       "Calling it now.",
       {"get_time"},
       {{{"timezone", "UTC"}}}},
      {ToolCallFormat::kDeepSeek,
       {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"},
       "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Checking.",
       {"get_weather"},
       {{{"city", "Paris"}}}},
  };
}

std::string without(std::string s, const std::vector<std::string>& markers) {
  for (const std::string& m : markers) {
    for (size_t at; (at = s.find(m)) != std::string::npos;) s.erase(at, m.size());
  }
  return s;
}

// A server with the fixture behind it, on a free loopback port.
class Served {
 public:
  Served(const Case& c, TokenType marker_type) {
    auto tok = marker_vocab(c.markers, marker_type);
    if (tok == nullptr) return;
    ids_ = tok->encode(c.output, /*add_special=*/false, /*parse_special=*/true);
    for (const std::string& m : c.markers) {
      const int32_t id = tok->token_id(m).value_or(-1);
      n_marker_ids_ += static_cast<int>(std::count(ids_.begin(), ids_.end(), id));
    }
    http_ = std::make_unique<HttpServer>(
        ServerConfig{.port = 0, .http_threads = 4, .tool_call_format = tool_call_format_name(c.format)}, metrics_);
    if (!http_->bind().ok()) return;
    http_->start();
    auto chat = ChatTemplate::create("{% for m in messages %}{{ m['content'] }}{% endfor %}", "<s>", "</s>");
    if (!chat.ok()) return;
    ok_ = http_->set_service(std::make_shared<TokenFixtureService>(std::move(tok), ids_), std::move(chat).value()).ok();
  }
  ~Served() {
    if (http_) http_->shutdown(1);
  }
  bool ok() const { return ok_; }
  int n_marker_ids() const { return n_marker_ids_; }
  size_t n_ids() const { return ids_.size(); }

  // POST /v1/chat/completions; the JSON body, or for a stream the chunks' data.
  std::vector<json> chat(bool tools, bool stream) {
    json body = {{"model", "fixture"},
                 {"messages", {{{"role", "user"}, {"content", "weather?"}}}},
                 {"stream", stream},
                 // held back by the engine while it may begin: the markers land behind that text
                 {"stop", {"<<END>>"}}};
    if (tools) {
      body["tools"] = json::array();
      for (const char* name : {"get_weather", "get_time"}) {
        body["tools"].push_back({{"type", "function"},
                                 {"function", {{"name", name}, {"parameters", {{"type", "object"}}}}}});
      }
    }
    httplib::Client cli("127.0.0.1", http_->port());
    cli.set_read_timeout(10, 0);
    auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    std::vector<json> out;
    if (!res) return out;
    EXPECT_EQ(res->status, 200) << res->body;
    if (!stream) {
      out.push_back(json::parse(res->body, nullptr, false));
      return out;
    }
    std::istringstream lines(res->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
      out.push_back(json::parse(line.substr(6), nullptr, false));
    }
    return out;
  }

 private:
  MetricRegistry metrics_;
  std::unique_ptr<HttpServer> http_;
  std::vector<int32_t> ids_;
  int n_marker_ids_ = 0;
  bool ok_ = false;
};

struct ToolCallReply {
  std::string content;
  std::vector<std::string> names;
  std::vector<json> arguments;
  std::string finish_reason;
};

ToolCallReply read_tool_call_reply(const std::vector<json>& bodies, bool stream) {
  ToolCallReply r;
  if (!stream) {
    if (bodies.empty() || !bodies[0].is_object()) return r;
    const json& choice = bodies[0]["choices"][0];
    const json& msg = choice["message"];
    if (msg["content"].is_string()) r.content = msg["content"];
    if (msg.contains("tool_calls")) {
      for (const json& t : msg["tool_calls"]) {
        r.names.push_back(t["function"]["name"]);
        r.arguments.push_back(json::parse(t["function"]["arguments"].get<std::string>(), nullptr, false));
      }
    }
    r.finish_reason = choice["finish_reason"];
    return r;
  }
  std::vector<std::string> args;
  for (const json& chunk : bodies) {
    if (!chunk.is_object() || chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) r.content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) {
      for (const json& t : delta["tool_calls"]) {
        const size_t i = t["index"];
        if (args.size() <= i) args.resize(i + 1), r.names.resize(i + 1);
        if (t["function"].contains("name")) r.names[i] = t["function"]["name"];
        args[i] += t["function"]["arguments"].get<std::string>();
      }
    }
    if (choice["finish_reason"].is_string()) r.finish_reason = choice["finish_reason"];
  }
  for (const std::string& a : args) r.arguments.push_back(json::parse(a, nullptr, false));
  return r;
}

void check_calls(TokenType type) {
  for (const Case& c : cases()) {
    Served served(c, type);
    ASSERT_TRUE(served.ok()) << tool_call_format_name(c.format);
    // The markers are tokens of their own (so a control marker has no text in the events).
    EXPECT_GE(served.n_marker_ids(), static_cast<int>(c.names.size()));
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(std::string(tool_call_format_name(c.format)) + (stream ? " streamed" : " plain"));
      const ToolCallReply r = read_tool_call_reply(served.chat(/*tools=*/true, stream), stream);
      EXPECT_EQ(r.names, c.names);
      EXPECT_EQ(r.arguments, c.arguments);
      EXPECT_EQ(r.content, c.content);
      EXPECT_EQ(r.finish_reason, "tool_calls");
    }
  }
}

TEST(ToolCallTokens, MarkersAsControlTokensAreParsed) { check_calls(TokenType::kControl); }

TEST(ToolCallTokens, MarkersAsOrdinaryTokensAreParsed) { check_calls(TokenType::kUserDefined); }

// Without tools the markers are not read: a control marker stays out of the
// text (as always), an ordinary one is text like any other.
TEST(ToolCallTokens, WithoutToolsControlMarkersNeverReachContent) {
  for (const Case& c : cases()) {
    for (const TokenType type : {TokenType::kControl, TokenType::kUserDefined}) {
      Served served(c, type);
      ASSERT_TRUE(served.ok());
      const std::string want = type == TokenType::kControl ? without(c.output, c.markers) : c.output;
      for (const bool stream : {false, true}) {
        SCOPED_TRACE(std::string(tool_call_format_name(c.format)) + (stream ? " streamed" : " plain") +
                     (type == TokenType::kControl ? " control" : " user-defined"));
        const ToolCallReply r = read_tool_call_reply(served.chat(/*tools=*/false, stream), stream);
        EXPECT_EQ(r.content, want);
        EXPECT_TRUE(r.names.empty());
        EXPECT_EQ(r.finish_reason, "stop");
      }
    }
  }
}

// A call that does not parse becomes content, without the control markers'
// text (an ordinary marker is text, and stays).
TEST(ToolCallTokens, AFailedCallKeepsControlMarkersOutOfContent) {
  Case c = cases()[1];  // hermes
  c.output = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": nope}\n</tool_call>";
  for (const TokenType type : {TokenType::kControl, TokenType::kUserDefined}) {
    Served served(c, type);
    ASSERT_TRUE(served.ok());
    for (const bool stream : {false, true}) {
      SCOPED_TRACE(std::string(stream ? "streamed" : "plain") + (type == TokenType::kControl ? " control" : " user-defined"));
      const ToolCallReply r = read_tool_call_reply(served.chat(/*tools=*/true, stream), stream);
      EXPECT_TRUE(r.names.empty());
      EXPECT_EQ(r.content, type == TokenType::kControl ? without(c.output, c.markers) : c.output);
      EXPECT_EQ(r.finish_reason, "stop");
    }
  }
}

// A stop string cuts the output: a control marker after it is not read.
TEST(ToolCallTokens, AControlMarkerPastAStopStringIsDropped) {
  Case c = cases()[0];  // llama3
  c.output = "Done.<<END>><|python_tag|>{\"name\": \"get_weather\", \"parameters\": {}}";
  Served served(c, TokenType::kControl);
  ASSERT_TRUE(served.ok());
  for (const bool stream : {false, true}) {
    const ToolCallReply r = read_tool_call_reply(served.chat(/*tools=*/true, stream), stream);
    EXPECT_TRUE(r.names.empty());
    EXPECT_EQ(r.content, "Done.");
    EXPECT_EQ(r.finish_reason, "stop");
  }
}

}  // namespace
}  // namespace sluice::server
