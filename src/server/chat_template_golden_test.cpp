// The 17 real chat templates of ../shared/chat-templates against the text
// Python's jinja2 renders under Hugging Face's conventions (expected.json):
// every conversation (plain, system prompt, multi-turn, no generation prompt,
// tools, a tool call and its result, unicode) must match byte for byte; where
// jinja2 raises, sluice must fail with the same message; `not_judged` cases
// (jinja2 fails for a Python-only reason) only have to render or fail cleanly.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/test_data.h"
#include "server/chat_template.h"

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

}  // namespace
}  // namespace sluice::server
