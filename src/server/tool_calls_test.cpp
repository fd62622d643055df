// Tool-call parsing per format: whole outputs and the same text fed one byte
// at a time give the same content and calls; text before a call is content;
// several calls; malformed or unfinished calls fall back to content; streaming
// holds back only what may start a call; formats detected from the real templates.
#include "server/tool_calls.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"

namespace sluice::server {
namespace {

ParsedOutput byte_by_byte(ToolCallFormat f, std::string_view text, uint64_t seed = 0) {
  ParsedOutput out;
  ToolCallParser p(f, seed);
  for (char c : text) p.push(std::string_view(&c, 1), &out);
  p.finish(&out);
  return out;
}

struct Want {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

// Checks the whole parse and the byte-by-byte parse against `want`.
void expect_parse(ToolCallFormat f, const std::string& text, const Want& want) {
  for (int streamed = 0; streamed < 2; ++streamed) {
    SCOPED_TRACE(streamed ? "fed byte by byte" : "whole");
    const ParsedOutput got = streamed ? byte_by_byte(f, text, 7) : parse_tool_calls(f, text, 7);
    EXPECT_EQ(got.content, want.content);
    ASSERT_EQ(got.tool_calls.size(), want.calls.size());
    for (size_t i = 0; i < want.calls.size(); ++i) {
      EXPECT_EQ(got.tool_calls[i].name, want.calls[i].first);
      EXPECT_EQ(got.tool_calls[i].arguments, want.calls[i].second);
      const char* id_form = f == ToolCallFormat::kMistral ? "[a-zA-Z0-9]{9}" : "call_[0-9a-f]{16}";
      EXPECT_TRUE(std::regex_match(got.tool_calls[i].id, std::regex(id_form))) << got.tool_calls[i].id;
    }
  }
}

const std::string kParis = R"({"city":"Paris"})";
const std::string kLondon = R"({"city":"London","unit":"celsius"})";

TEST(ToolCalls, Hermes) {
  const std::string paris = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::string london =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"London\", \"unit\": \"celsius\"}}\n</tool_call>";
  expect_parse(ToolCallFormat::kHermes, paris, {"", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kHermes, "Let me check.\n" + paris + "\n" + london + "\n",
               {"Let me check.", {{"get_weather", kParis}, {"get_weather", kLondon}}});
  // Arguments given as a JSON string are kept as they are.
  expect_parse(ToolCallFormat::kHermes,
               "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", {"", {{"f", R"({"a": 1})"}}});
  expect_parse(ToolCallFormat::kHermes, "a < b and <tool> is not a call", {"a < b and <tool> is not a call", {}});
}

TEST(ToolCalls, Llama3) {
  expect_parse(ToolCallFormat::kLlama3, R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
               {"", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kLlama3, R"(<|python_tag|>{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}})",
               {"", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kLlama3,
               "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"London\", \"unit\": \"celsius\"}}",
               {"", {{"get_weather", kParis}, {"get_weather", kLondon}}});
  expect_parse(ToolCallFormat::kLlama3, "I will look it up. <|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               {"I will look it up.", {{"get_weather", kParis}}});
  // Braces inside strings do not end the object.
  expect_parse(ToolCallFormat::kLlama3, R"({"name": "echo", "parameters": {"text": "}{\"]"}})",
               {"", {{"echo", R"({"text":"}{\"]"})"}}});
  // JSON that is not a call, and braces later in the text, are content.
  expect_parse(ToolCallFormat::kLlama3, R"({"answer": 42})", {R"({"answer": 42})", {}});
  expect_parse(ToolCallFormat::kLlama3, R"(Use {"name": "x"} here)", {R"(Use {"name": "x"} here)", {}});
}

TEST(ToolCalls, Mistral) {
  const std::string text =
      R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}, )"
      R"({"name": "get_weather", "arguments": {"city": "London", "unit": "celsius"}, "id": "xyz987654"}])";
  expect_parse(ToolCallFormat::kMistral, text, {"", {{"get_weather", kParis}, {"get_weather", kLondon}}});
  const ParsedOutput p = parse_tool_calls(ToolCallFormat::kMistral, text);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].id, "abcDEF123");
  EXPECT_EQ(p.tool_calls[1].id, "xyz987654");
  // Without the marker (a control token whose text the engine does not emit).
  expect_parse(ToolCallFormat::kMistral, R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])",
               {"", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kMistral, R"(Sure. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}])",
               {"Sure.", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kMistral, "[1, 2] are numbers", {"[1, 2] are numbers", {}});
}

TEST(ToolCalls, DeepSeek) {
  const std::string call_paris =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>";
  const std::string call_london =
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"London\", \"unit\": \"celsius\"}\n```"
      "<｜tool▁call▁end｜>";
  expect_parse(ToolCallFormat::kDeepSeek,
               "<think>\nThe user wants weather.\n</think>\n\n<｜tool▁calls▁begin｜>" + call_paris + "\n" + call_london +
                   "<｜tool▁calls▁end｜>",
               {"<think>\nThe user wants weather.\n</think>", {{"get_weather", kParis}, {"get_weather", kLondon}}});
  expect_parse(ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜>" + call_paris + "<｜tool▁calls▁end｜>",
               {"", {{"get_weather", kParis}}});
  // A lone call, and a block never closed.
  expect_parse(ToolCallFormat::kDeepSeek, call_paris, {"", {{"get_weather", kParis}}});
  expect_parse(ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜>" + call_paris, {"", {{"get_weather", kParis}}});
}

TEST(ToolCalls, MalformedOrUnfinishedCallsBecomeContent) {
  for (const auto& [f, text] : std::vector<std::pair<ToolCallFormat, std::string>>{
           {ToolCallFormat::kHermes, "Hi\n<tool_call>\n{\"name\": }\n</tool_call> and more"},
           {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\""},
           {ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>"},
           {ToolCallFormat::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par"},
           {ToolCallFormat::kLlama3, "<|python_tag|>brave_search.call(query=\"x\")"},
           {ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": 3}]"},
           {ToolCallFormat::kMistral, "[TOOL_CALLS] nope"},
           {ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{oops}\n```<｜tool▁call▁end｜>"},
           {ToolCallFormat::kDeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}"},
           {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + std::string(100, '[') +
                                         std::string(100, ']') + "}}</tool_call>"},
       }) {
    SCOPED_TRACE(text);
    expect_parse(f, text, {text, {}});
  }
}

// Random outputs built from marker fragments, JSON pieces and text, fed in
// random chunks: the same result as the whole output; without calls the
// content is the output itself; with calls, no more content than output.
TEST(ToolCalls, RandomOutputsInRandomChunksParseAsTheWhole) {
  const std::vector<std::string> parts = {
      "<tool_call>", "</tool_call>", "<tool_", "[TOOL_CALLS]", "[TOOL", "<|python_tag|>", "<｜tool▁calls▁begin｜>",
      "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "function", "```json\n",
      "```", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "{\"name\": \"g\", \"parameters\": {}}", "{", "}",
      "[", "]", "\"", "\\", ";", " ", "\n", "text", "é", "get_weather\n"};
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += parts[rng() % parts.size()];
    for (ToolCallFormat f : {ToolCallFormat::kLlama3, ToolCallFormat::kHermes, ToolCallFormat::kMistral,
                             ToolCallFormat::kDeepSeek}) {
      const ParsedOutput whole = parse_tool_calls(f, text, 9);
      ParsedOutput chunked;
      ToolCallParser p(f, 9);
      for (size_t i = 0; i < text.size();) {
        const size_t len = std::min(text.size() - i, static_cast<size_t>(1 + rng() % 7));
        p.push(std::string_view(text).substr(i, len), &chunked);
        i += len;
      }
      p.finish(&chunked);
      SCOPED_TRACE(std::string(tool_call_format_name(f)) + ": " + text);
      ASSERT_EQ(chunked.content, whole.content);
      ASSERT_EQ(chunked.tool_calls.size(), whole.tool_calls.size());
      for (size_t c = 0; c < whole.tool_calls.size(); ++c) {
        EXPECT_EQ(chunked.tool_calls[c].name, whole.tool_calls[c].name);
        EXPECT_EQ(chunked.tool_calls[c].arguments, whole.tool_calls[c].arguments);
        EXPECT_TRUE(nlohmann::json::parse(whole.tool_calls[c].arguments, nullptr, false).is_object());
      }
      if (whole.tool_calls.empty()) ASSERT_EQ(whole.content, text);
      else ASSERT_LT(whole.content.size(), text.size());
    }
  }
}

TEST(ToolCalls, StreamingReleasesPlainTextAndHoldsOnlyAPossibleMarker) {
  ToolCallParser p(ToolCallFormat::kHermes, 1);
  ParsedOutput out;
  p.push("Hello", &out);
  EXPECT_EQ(out.content, "Hello");
  p.push(" wor", &out);
  EXPECT_EQ(out.content, "Hello wor");
  p.push("ld <tool_", &out);
  EXPECT_EQ(out.content, "Hello world");  // " <tool_" may begin a call
  p.push("call>{\"name\": \"f\", \"arguments\": {}}", &out);
  EXPECT_EQ(out.content, "Hello world");
  EXPECT_TRUE(out.tool_calls.empty());
  p.push("</tool_call>", &out);
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].name, "f");
  EXPECT_EQ(out.tool_calls[0].arguments, "{}");
  p.finish(&out);
  EXPECT_EQ(out.content, "Hello world");
  EXPECT_EQ(p.n_calls(), 1);

  // A tail that turns out not to be a marker is released with the next piece.
  ToolCallParser q(ToolCallFormat::kHermes);
  ParsedOutput o2;
  q.push("x <tool", &o2);
  EXPECT_EQ(o2.content, "x");
  q.push("box", &o2);
  EXPECT_EQ(o2.content, "x <toolbox");
}

TEST(ToolCalls, NoneFormatPassesTextThroughAndMaxCallsDropsExtraCalls) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kNone, text).content, text);
  ToolCallParser one(ToolCallFormat::kHermes, 3, /*max_calls=*/1);
  ParsedOutput out;
  one.push(text + text, &out);
  one.finish(&out);
  EXPECT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.content, "");
}

TEST(ToolCalls, IdsAreDistinctAndFollowTheSeed) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const ParsedOutput a = parse_tool_calls(ToolCallFormat::kHermes, text + text, 1);
  const ParsedOutput b = parse_tool_calls(ToolCallFormat::kHermes, text + text, 2);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  ASSERT_EQ(b.tool_calls.size(), 2u);
  EXPECT_NE(a.tool_calls[0].id, a.tool_calls[1].id);
  EXPECT_NE(a.tool_calls[0].id, b.tool_calls[0].id);
  EXPECT_EQ(a.tool_calls[0].id, parse_tool_calls(ToolCallFormat::kHermes, text, 1).tool_calls[0].id);
}

TEST(ToolCalls, FormatNamesRoundTripAndUnknownNamesAreRefused) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kLlama3, ToolCallFormat::kHermes,
                           ToolCallFormat::kMistral, ToolCallFormat::kDeepSeek}) {
    auto back = parse_tool_call_format(tool_call_format_name(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, f);
  }
  auto bad = parse_tool_call_format("qwen");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hermes"), std::string::npos);
}

TEST(ToolCalls, FormatIsDetectedFromTheRealTemplates) {
  const std::string dir = testing::shared_dir() + "/chat-templates";
  SKIP_UNLESS_EXISTS(dir + "/expected.json");
  const std::vector<std::pair<std::string, ToolCallFormat>> want = {
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", ToolCallFormat::kNone},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", ToolCallFormat::kNone},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", ToolCallFormat::kDeepSeek},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kDeepSeek},
      {"llama-cpp-deepseek-r1.jinja", ToolCallFormat::kDeepSeek},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", ToolCallFormat::kNone},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kNone},
      {"meetkai-functionary-medium-v3.1.jinja", ToolCallFormat::kNone},
      {"meetkai-functionary-medium-v3.2.jinja", ToolCallFormat::kNone},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ToolCallFormat::kNone},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
  };
  for (const auto& [name, format] : want) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    ASSERT_TRUE(in) << name;
    std::ostringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(ss.str())), std::string(tool_call_format_name(format)))
        << name;
  }
}

}  // namespace
}  // namespace sluice::server

namespace sluice::server {
namespace {

// Feeds `parts` in order: text as push(), a part in markers as push_marker().
ParsedOutput with_markers(ToolCallFormat f, const std::vector<std::string>& parts,
                          const std::vector<std::string>& markers) {
  ParsedOutput out;
  ToolCallParser p(f, 7);
  for (const std::string& s : parts) {
    if (std::find(markers.begin(), markers.end(), s) != markers.end()) {
      if (f != ToolCallFormat::kNone) {
        EXPECT_TRUE(is_tool_call_marker(f, s)) << s;
      }
      p.push_marker(s, &out);
    } else {
      p.push(s, &out);
    }
  }
  p.finish(&out);
  return out;
}

TEST(ToolCalls, MarkersFedApartParseAsTheirTextAndNeverBecomeContent) {
  const std::string json = R"({"name": "get_weather", "arguments": {"city": "Paris"}})";
  const std::vector<std::string> hermes = {"<tool_call>", "</tool_call>"};
  ParsedOutput o = with_markers(ToolCallFormat::kHermes, {"Sure.\n", "<tool_call>", "\n" + json + "\n", "</tool_call>"}, hermes);
  EXPECT_EQ(o.content, "Sure.");
  ASSERT_EQ(o.tool_calls.size(), 1u);
  EXPECT_EQ(o.tool_calls[0].arguments, kParis);
  // A call that fails: its text is content, without the markers fed apart.
  o = with_markers(ToolCallFormat::kHermes, {"Sure.\n", "<tool_call>", "{bad}", "</tool_call>", " after"}, hermes);
  EXPECT_TRUE(o.tool_calls.empty());
  EXPECT_EQ(o.content, "Sure.\n{bad} after");
  // An unfinished one at the end.
  o = with_markers(ToolCallFormat::kHermes, {"<tool_call>", "{\"name\": "}, hermes);
  EXPECT_EQ(o.content, "{\"name\": ");
  // A closing marker in plain text is not content either.
  o = with_markers(ToolCallFormat::kHermes, {"a ", "</tool_call>", " b"}, hermes);
  EXPECT_EQ(o.content, "a  b");
  o = with_markers(ToolCallFormat::kLlama3,
                   {"Looking.", "<|python_tag|>", R"({"name": "get_weather", "parameters": {"city": "Paris"}})"},
                   {"<|python_tag|>"});
  EXPECT_EQ(o.content, "Looking.");
  ASSERT_EQ(o.tool_calls.size(), 1u);
  o = with_markers(ToolCallFormat::kMistral,
                   {"Now.", "[TOOL_CALLS]", R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])"},
                   {"[TOOL_CALLS]"});
  EXPECT_EQ(o.content, "Now.");
  ASSERT_EQ(o.tool_calls.size(), 1u);
  const std::vector<std::string> ds = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                       "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
  o = with_markers(ToolCallFormat::kDeepSeek,
                   {"Hm.", ds[0], ds[1], "function", ds[2], "get_weather\n```json\n{\"city\": \"Paris\"}\n```", ds[3], ds[4]},
                   ds);
  EXPECT_EQ(o.content, "Hm.");
  ASSERT_EQ(o.tool_calls.size(), 1u);
  EXPECT_EQ(o.tool_calls[0].arguments, kParis);
  // No format: markers are dropped, text passes.
  o = with_markers(ToolCallFormat::kNone, {"a", "<tool_call>", "b"}, hermes);
  EXPECT_EQ(o.content, "ab");
  EXPECT_FALSE(is_tool_call_marker(ToolCallFormat::kHermes, "<|python_tag|>"));
  EXPECT_FALSE(is_tool_call_marker(ToolCallFormat::kNone, "<tool_call>"));
}

}  // namespace
}  // namespace sluice::server
