// The 17 real chat templates of ../shared/chat-templates against the text
// Python's jinja2 renders under Hugging Face's conventions (expected.json):
// every conversation (plain, system prompt, multi-turn, no generation prompt,
// tools, a tool call and its result, unicode) must match byte for byte; where
// jinja2 raises, sluice must fail with the same message; `not_judged` cases
// (jinja2 fails for a Python-only reason) only have to render or fail cleanly.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "server/chat_template.h"
#include "server/openai_request.h"

namespace sluice::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, AllTemplatesMatchJinja2) {
  const std::string dir = testing::shared_dir() + "/chat-templates";
  SKIP_UNLESS_EXISTS(dir + "/expected.json");
  const ojson all = ojson::parse(read_text(dir + "/expected.json"));
  const ojson& conversations = all.at("conversations");
  const int64_t fixed_clock = 1767323045;  // 2026-01-02 03:04:05 UTC, the clock expected.json used
  int n_cases = 0, n_templates = 0;
  for (const auto& [name, cases] : all.at("templates").items()) {
    SCOPED_TRACE(name);
    auto tmpl = ChatTemplate::create(read_text(dir + "/" + name), "<s>", "</s>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    ++n_templates;
    for (const auto& [case_name, expected] : cases.items()) {
      SCOPED_TRACE(case_name);
      const ojson& conv = conversations.at(case_name);
      ChatOptions options{.add_generation_prompt = conv.value("add_generation_prompt", true), .now_unix = fixed_clock};
      if (conv.contains("tools")) options.tools = conv.at("tools");
      if (conv.contains("documents")) options.documents = conv.at("documents");
      auto out = tmpl->apply_json(conv.at("messages"), options);
      ++n_cases;
      if (expected.contains("text")) {
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        EXPECT_EQ(*out, expected.at("text").get<std::string>());
      } else if (expected.contains("error")) {
        // "UndefinedError: 'x' is undefined" / "TemplateError: msg": sluice's message carries the part after the type.
        const std::string want = expected.at("error").get<std::string>();
        const std::string message = want.substr(want.find(": ") + 2);
        ASSERT_FALSE(out.ok()) << "rendered instead of failing with " << want;
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().to_string();
        EXPECT_NE(out.status().message().find(message), std::string::npos) << out.status().to_string();
      } else {
        EXPECT_TRUE(out.ok() || out.status().code() == StatusCode::kInvalidArgument) << out.status().to_string();
      }
    }
  }
  EXPECT_EQ(n_templates, 17);
  EXPECT_GE(n_cases, 17 * 7);
}

// The tool conversation as an OpenAI client sends it (arguments a JSON string)
// goes through request parsing and the template and gives the same text
// jinja2 renders for the HF form.
TEST(ChatTemplateGolden, OpenAiToolConversationRendersAsHuggingFaceForm) {
  const std::string dir = testing::shared_dir() + "/chat-templates";
  SKIP_UNLESS_EXISTS(dir + "/expected.json");
  const ojson all = ojson::parse(read_text(dir + "/expected.json"));
  const ojson& conv = all.at("conversations").at("tool_result");
  ojson body = {{"model", "m"}, {"messages", conv.at("messages")}, {"tools", conv.at("tools")}};
  for (auto& m : body["messages"]) {
    if (!m.contains("tool_calls")) continue;
    for (auto& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
  }
  auto parsed = parse_generation_request(Endpoint::kChat, body.dump());
  ASSERT_TRUE(std::holds_alternative<GenerationRequest>(parsed)) << std::get<ApiError>(parsed).message;
  const GenerationRequest& req = std::get<GenerationRequest>(parsed);
  int n_compared = 0;
  for (const auto& [name, cases] : all.at("templates").items()) {
    SCOPED_TRACE(name);
    if (!cases.contains("tool_result") || !cases.at("tool_result").contains("text")) continue;
    auto tmpl = ChatTemplate::create(read_text(dir + "/" + name), "<s>", "</s>");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
    auto out = tmpl->apply(req.messages, ChatOptions{.tools = req.tools, .now_unix = 1767323045});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(*out, cases.at("tool_result").at("text").get<std::string>());
    ++n_compared;
  }
  EXPECT_GE(n_compared, 10);

  // Content null (what OpenAI clients send beside tool calls) reaches the
  // template as none: DeepSeek-R1's renders the call from history only then.
  body["messages"][1]["content"] = nullptr;
  auto with_null = parse_generation_request(Endpoint::kChat, body.dump());
  ASSERT_TRUE(std::holds_alternative<GenerationRequest>(with_null));
  auto ds = ChatTemplate::create(read_text(dir + "/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"), "<s>", "</s>");
  ASSERT_TRUE(ds.ok());
  const GenerationRequest& r2 = std::get<GenerationRequest>(with_null);
  auto text = ds->apply(r2.messages, ChatOptions{.tools = r2.tools});
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_NE(text->find("<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"),
            std::string::npos)
      << *text;
}

}  // namespace
}  // namespace sluice::server
