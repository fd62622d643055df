// Request validation: every malformed or out-of-range body is a 400 naming the
// field; valid bodies map onto GenerationRequest. Also the response shapes.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_response.h"

namespace sluice::server {
namespace {

ApiError error_of(Endpoint ep, const std::string& body) {
  auto r = parse_generation_request(ep, body);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

// A body refused with a 400 that names the field and the reason.
struct BadBody {
  Endpoint ep;
  std::string body, param, code;
};

void expect_refused(const std::vector<BadBody>& cases) {
  for (const BadBody& c : cases) {
    ApiError e = error_of(c.ep, c.body);
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

GenerationRequest ok_of(Endpoint ep, const std::string& body) {
  auto r = parse_generation_request(ep, body);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << "refused: " << body << ": " << e->message;
    return {};
  }
  return std::get<GenerationRequest>(r);
}

TEST(OpenAiRequest, ParsesACompletionRequest) {
  GenerationRequest r = ok_of(Endpoint::kCompletions,
                              R"({"model":"m","prompt":"Once","max_tokens":8,"temperature":0,"top_p":0.5,"n":2,
                                  "stop":["\n","."],"seed":-3,"presence_penalty":1.5,"frequency_penalty":-1,
                                  "logprobs":2,"stream":true,"stream_options":{"include_usage":true},
                                  "stop_token_ids":[7, 0]})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7, 0}));
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.max_tokens, 8);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.top_p, 0.5f);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "."}));
  EXPECT_EQ(r.seed, -3);
  EXPECT_EQ(r.presence_penalty, 1.5f);
  EXPECT_EQ(r.frequency_penalty, -1.0f);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  GenerationRequest ids = ok_of(Endpoint::kCompletions, R"({"model":"m","prompt":[1, 2, 3],"max_tokens":null})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ids.max_tokens.has_value());
  EXPECT_EQ(ids.top_logprobs, -1);
}

TEST(OpenAiRequest, ParsesAChatRequest) {
  GenerationRequest r = ok_of(Endpoint::kChat,
                              R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
                                  {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                                  {"role":"assistant","content":null}],
                                  "logprobs":true,"top_logprobs":3,"max_completion_tokens":5})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.max_tokens, 5);
}

TEST(OpenAiRequest, RefusesBadBodiesWith400NamingTheField) {
  expect_refused({
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x")", "", "invalid_json"},
      {Endpoint::kCompletions, R"([1,2])", "", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m"})", "prompt", "missing_required_parameter"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":5})", "prompt", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":["a","b"]})", "prompt", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":"10"})", "max_tokens", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":1e300})", "max_tokens", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":99999999999})", "max_tokens", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","temperature":3})", "temperature", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","temperature":"hot"})", "temperature", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","top_p":0})", "top_p", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","n":0})", "n", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","n":1000})", "n", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})", "stop", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop":[1]})", "stop", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop":""})", "stop", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop_token_ids":[-1]})", "stop_token_ids", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop_token_ids":[1.5]})", "stop_token_ids", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop_token_ids":7})", "stop_token_ids", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop_token_ids":[4294967296]})", "stop_token_ids", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","logprobs":6})", "logprobs", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","logprobs":true})", "logprobs", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stream":"yes"})", "stream", "invalid_type"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","echo":true})", "echo", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","logit_bias":{"1":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","presence_penalty":-2.5})", "presence_penalty", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":[1,-2]})", "prompt", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":7,"prompt":"x"})", "model", "invalid_type"},
      {Endpoint::kChat, R"({"model":"m"})", "messages", "missing_required_parameter"},
      {Endpoint::kChat, R"({"model":"m","messages":[]})", "messages", "invalid_value"},
      {Endpoint::kChat, R"({"model":"m","messages":"hi"})", "messages", "invalid_type"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role", "missing_required_parameter"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", "invalid_value"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":7}]})", "messages[0].content", "invalid_type"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content", "missing_required_parameter"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type", "invalid_value"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs",
       "invalid_value"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       "top_logprobs", "invalid_value"},
  });
}

// A chat body with `extra` fields after the messages.
std::string chat_with(const std::string& extra, const std::string& messages = R"([{"role":"user","content":"x"}])") {
  return R"({"model":"m","messages":)" + messages + (extra.empty() ? "" : "," + extra) + "}";
}

const std::string kTool = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})";

TEST(OpenAiRequest, MalformedToolsToolChoiceAndToolMessagesAre400s) {
  expect_refused({
      {Endpoint::kChat, chat_with(R"("tools":"get_weather")"), "tools", "invalid_type"},
      {Endpoint::kChat, chat_with(R"("tools":[7])"), "tools[0]", "invalid_type"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"function"}])"), "tools[0].function", "missing_required_parameter"},
      {Endpoint::kChat, chat_with(R"("tools":[{"function":{"name":"f"}}])"), "tools[0].type", "missing_required_parameter"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"code_interpreter","function":{"name":"f"}}])"), "tools[0].type",
       "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"function","function":{"description":"d"}}])"),
       "tools[0].function.name", "missing_required_parameter"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"function","function":{"name":"get weather!"}}])"),
       "tools[0].function.name", "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])"),
       "tools[0].function.parameters", "invalid_type"},
      {Endpoint::kChat, chat_with(R"("tools":[{"type":"function","function":{"name":"f","description":3}}])"),
       "tools[0].function.description", "invalid_type"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + "," + kTool + "]"), "tools[1].function.name", "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":"sometimes")"), "tool_choice", "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tool_choice":"required")"), "tool_choice", "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":7)"), "tool_choice", "invalid_type"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":{"type":"function","function":{"name":"other"}})"),
       "tool_choice.function.name", "invalid_value"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":{"type":"function"})"), "tool_choice.function",
       "missing_required_parameter"},
      {Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"parallel_tool_calls":"yes")"), "parallel_tool_calls",
       "invalid_type"},
      {Endpoint::kChat, chat_with(R"("functions":[{"name":"f"}])"), "functions", "invalid_value"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","tools":[)" + kTool + "]}", "tools", "invalid_value"},
      {Endpoint::kChat, chat_with("", R"([{"role":"assistant","content":null,"tool_calls":{"id":"a"}}])"),
       "messages[0].tool_calls", "invalid_type"},
      {Endpoint::kChat, chat_with("", R"([{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}])"),
       "messages[0].tool_calls", "invalid_value"},
      {Endpoint::kChat, chat_with("", R"([{"role":"assistant","tool_calls":[{"id":"a","type":"function"}]}])"),
       "messages[0].tool_calls[0].function", "missing_required_parameter"},
      {Endpoint::kChat, chat_with("", R"([{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])"),
       "messages[0].tool_calls[0].function.name", "missing_required_parameter"},
      {Endpoint::kChat,
       chat_with("", R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}])"),
       "messages[0].tool_calls[0].function.arguments", "invalid_type"},
      {Endpoint::kChat, chat_with("", R"([{"role":"tool","tool_call_id":"a"}])"), "messages[0].content",
       "missing_required_parameter"},
      {Endpoint::kChat, chat_with("", R"([{"role":"tool","content":"r","tool_call_id":5}])"), "messages[0].tool_call_id",
       "invalid_type"},
      {Endpoint::kChat,
       chat_with(R"("tools":[{"type":"function","function":{"name":"f","parameters":{"a":)" + std::string(100, '[') +
                 std::string(100, ']') + "}}}]"),
       "tools[0]", "invalid_value"},
      {Endpoint::kChat,
       chat_with("", R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":)" +
                         std::string(100, '[') + std::string(100, ']') + "}}}]}]"),
       "messages[0].tool_calls[0].function.arguments", "invalid_value"},
  });
}

TEST(OpenAiRequest, ParsesToolsToolChoiceAndAToolConversation) {
  GenerationRequest r = ok_of(
      Endpoint::kChat,
      chat_with(R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",)"
                R"("parameters":{"type":"object","properties":{"unit":{},"city":{}}}}}],)"
                R"("tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false)",
                R"([{"role":"user","content":"Weather in Paris?"},)"
                R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
                R"("function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},)"
                R"({"role":"tool","tool_call_id":"call_1","name":"get_weather","content":"18 C"}])"));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  // The arguments string reaches the template as the object it holds (HF's convention).
  EXPECT_EQ(r.messages[1].tool_calls.dump(),
            R"([{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}])");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  EXPECT_EQ(r.messages[2].content, "18 C");
  // Key order is kept as sent ("unit" before "city").
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"].dump(), R"({"unit":{},"city":{}})");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  EXPECT_FALSE(r.parallel_tool_calls);

  EXPECT_EQ(ok_of(Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":"none")")).tool_choice,
            ToolChoice::kNone);
  EXPECT_EQ(ok_of(Endpoint::kChat, chat_with(R"("tools":[)" + kTool + R"(],"tool_choice":"required")")).tool_choice,
            ToolChoice::kRequired);
  const GenerationRequest plain = ok_of(Endpoint::kChat, chat_with(R"("tools":[],"tool_choice":"auto")"));
  EXPECT_TRUE(plain.tools.is_null());
  EXPECT_TRUE(plain.parallel_tool_calls);
  // Arguments that are not JSON stay a string.
  const GenerationRequest odd = ok_of(
      Endpoint::kChat,
      chat_with("", R"([{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"not json"}}]}])"));
  EXPECT_EQ(odd.messages[0].tool_calls[0]["function"]["arguments"], "not json");
}

TEST(OpenAiResponse, ToolCallsInMessagesAndChunks) {
  ResponseInfo info{.endpoint = Endpoint::kChat, .id = "chatcmpl-1", .created = 7, .model = "m"};
  const ToolCall call{.id = "call_1", .name = "get_weather", .arguments = R"({"city":"Paris"})"};
  ChoiceOutput c{.index = 0, .tool_calls = {call}, .finish_reason = "tool_calls"};
  nlohmann::json r = response_json(info, {c}, usage_json(3, 2));
  const nlohmann::json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  c.text = "Checking.";
  EXPECT_EQ(response_json(info, {c}, usage_json(3, 2))["choices"][0]["message"]["content"], "Checking.");
  EXPECT_FALSE(response_json(info, {ChoiceOutput{.text = "hi"}}, usage_json(1, 1))["choices"][0]["message"].contains("tool_calls"));

  const nlohmann::json name = tool_call_chunk_json(info, 0, 2, call, false, true);
  const nlohmann::json& d = name["choices"][0]["delta"];
  EXPECT_EQ(d["role"], "assistant");
  EXPECT_TRUE(d["content"].is_null());
  EXPECT_EQ(d["tool_calls"][0]["index"], 2);
  EXPECT_EQ(d["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(d["tool_calls"][0]["function"]["arguments"], "");
  const nlohmann::json args = tool_call_chunk_json(info, 0, 2, call, true, false);
  EXPECT_FALSE(args["choices"][0]["delta"].contains("role"));
  EXPECT_FALSE(args["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  EXPECT_EQ(args["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
  EXPECT_TRUE(args["choices"][0]["finish_reason"].is_null());
}

TEST(OpenAiRequest, ErrorBodyHasTheOpenAiShape) {
  ApiError e = invalid_request("max_tokens", "too many", "context_length_exceeded");
  const nlohmann::json j = e.body();
  EXPECT_EQ(j["error"]["message"], "too many");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "max_tokens");
  EXPECT_EQ(j["error"]["code"], "context_length_exceeded");
  EXPECT_TRUE(invalid_request("", "x", "").body()["error"]["param"].is_null());
}

TEST(OpenAiResponse, CompletionAndChatShapes) {
  ResponseInfo info{.endpoint = Endpoint::kCompletions, .id = "cmpl-1", .created = 7, .model = "m", .logprobs = true};
  ChoiceOutput c{.index = 0, .text = "ab", .finish_reason = "length", .token_ids = {5, 6},
                 .logprobs = {{.token = "a", .logprob = -0.5f, .top = {{"a", -0.5f}}}, {.token = "b", .logprob = -1.0f}}};
  nlohmann::json r = response_json(info, {c}, usage_json(3, 2));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "ab");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"], nlohmann::json({"a", "b"}));
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], nlohmann::json({0, 1}));
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  EXPECT_FALSE(r["choices"][0].contains("token_ids"));
  EXPECT_FALSE(r.contains("prompt_token_ids"));

  info.endpoint = Endpoint::kChat;
  info.token_ids = true;
  info.prompt_token_ids = {1, 42};
  nlohmann::json with_ids = response_json(info, {c}, usage_json(2, 2));
  EXPECT_EQ(with_ids["choices"][0]["token_ids"], nlohmann::json({5, 6}));
  EXPECT_EQ(with_ids["prompt_token_ids"], nlohmann::json({1, 42}));
  nlohmann::json chunk = chunk_json(info, ChoiceOutput{.index = 1, .text = "x", .token_ids = {9}}, true, 0);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunk["choices"][0]["token_ids"], nlohmann::json({9}));
  nlohmann::json last = chunk_json(info, ChoiceOutput{.index = 1, .finish_reason = "stop"}, false, 1);
  EXPECT_EQ(last["choices"][0]["delta"], nlohmann::json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  nlohmann::json usage = usage_chunk_json(info, usage_json(1, 2));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
}

}  // namespace
}  // namespace sluice::server
