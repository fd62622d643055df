// The five shipped chat templates (the tokenizer_config.json texts of Llama 2,
// Llama 3, Mistral, Qwen2 and Gemma) against hand-written expected prompts, and
// the Jinja renderer's semantics and refusals.
#include "server/chat_template.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sluice::server {
namespace {

std::string template_text(const std::string& name) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/src/server/templates/" + name);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplate load(const std::string& name, const std::string& bos, const std::string& eos) {
  const std::string text = template_text(name);
  EXPECT_FALSE(text.empty()) << name;
  auto t = ChatTemplate::create(text, bos, eos);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().to_string();
  return std::move(t).value();
}

const std::vector<ChatMessage> kWithSystem = {
    {.role = "system", .content = "You are a helpful assistant."},
    {.role = "user", .content = "Hello"},
    {.role = "assistant", .content = "Hi there"},
    {.role = "user", .content = "How are you?"},
};
const std::vector<ChatMessage> kNoSystem(kWithSystem.begin() + 1, kWithSystem.end());

TEST(ChatTemplate, Llama2) {
  ChatTemplate t = load("llama2.jinja", "<s>", "</s>");
  EXPECT_EQ(*t.apply(kWithSystem, true),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello [/INST] Hi there </s>"
            "<s>[INST] How are you? [/INST]");
  EXPECT_EQ(*t.apply(kNoSystem, true), "<s>[INST] Hello [/INST] Hi there </s><s>[INST] How are you? [/INST]");
}

TEST(ChatTemplate, Llama3) {
  ChatTemplate t = load("llama3.jinja", "<|begin_of_text|>", "<|end_of_text|>");
  EXPECT_EQ(*t.apply(kWithSystem, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Without the generation prompt the text ends after the last turn; contents are trimmed.
  EXPECT_EQ(*t.apply({{.role = "user", .content = "  hi \n"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(ChatTemplate, Mistral) {
  ChatTemplate t = load("mistral.jinja", "<s>", "</s>");
  EXPECT_EQ(*t.apply(kNoSystem, true), "<s>[INST] Hello [/INST]Hi there</s>[INST] How are you? [/INST]");
  auto bad = t.apply(kWithSystem, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("Conversation roles must alternate"), std::string::npos) << bad.status().message();
}

TEST(ChatTemplate, Qwen2ChatMl) {
  ChatTemplate t = load("qwen2.jinja", "", "<|im_end|>");
  EXPECT_EQ(*t.apply(kWithSystem, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // No system message: the template supplies its default one.
  EXPECT_EQ(*t.apply({{.role = "user", .content = "Hello"}}, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Gemma) {
  ChatTemplate t = load("gemma.jinja", "<bos>", "<eos>");
  EXPECT_EQ(*t.apply(kNoSystem, true),
            "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"
            "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n");
  auto bad = t.apply(kWithSystem, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("System role not supported"), std::string::npos);
}

TEST(ChatTemplate, UnsupportedConstructsFailAtCreationByName) {
  auto include = ChatTemplate::create("{% include 'other.jinja' %}", "", "");
  ASSERT_FALSE(include.ok());
  EXPECT_EQ(include.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(include.status().message().find("include"), std::string::npos) << include.status().message();

  auto filter = ChatTemplate::create("{{ messages | groupby('role') | list }}", "", "");
  ASSERT_FALSE(filter.ok());
  EXPECT_EQ(filter.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(filter.status().message().find("groupby"), std::string::npos);
  EXPECT_NE(filter.status().message().find("line 1"), std::string::npos);

  // Methods are only known at render time: the trial render at creation finds them.
  auto method = ChatTemplate::create("{{ messages[0].content.zfill(3) }}", "", "");
  ASSERT_FALSE(method.ok());
  EXPECT_EQ(method.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(method.status().message().find("zfill"), std::string::npos);

  auto syntax = ChatTemplate::create("{% if x %}never closed", "", "");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("endif"), std::string::npos);
}

TEST(ChatTemplate, PassesToolsDocumentsAndToolMessagesAsHuggingFace) {
  auto t = ChatTemplate::create(
      "{{ messages | tojson }}|{{ tools is defined }}|{{ documents | length }}|{{ add_generation_prompt }}", "", "");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<ChatMessage> msgs = {
      {.role = "assistant",
       .content = "",
       .tool_calls = nlohmann::ordered_json::parse(
           R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}])")},
      {.role = "tool", .content = "r", .tool_call_id = "c1", .name = "f"},
  };
  const std::string json_msgs =
      R"([{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": )"
      R"({"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"}])";
  // Without tools or documents the variables stay undefined, as under HF.
  EXPECT_EQ(*t->apply(msgs, ChatOptions{.add_generation_prompt = false}), json_msgs + "|False|0|False");
  const ChatOptions with = {.add_generation_prompt = true,
                            .tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])"),
                            .documents = nlohmann::ordered_json::parse(R"([{"title": "t"}])")};
  EXPECT_EQ(*t->apply(msgs, with), json_msgs + "|True|1|True");
}

TEST(ChatTemplate, ToolCallArgumentsAreAMappingOrTextAsTheTemplateUsesThem) {
  const std::vector<ChatMessage> msgs = {
      {.role = "user", .content = "hi"},
      {.role = "assistant",
       .content_null = true,
       .tool_calls = nlohmann::ordered_json::parse(
           R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"city": "Paris", "n": [1, 2]}}}])")},
  };
  const std::string body =
      "{% for m in messages %}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}";
  auto mapping = ChatTemplate::create(body + "{{ c.function.arguments | tojson }}|{{ m.content is none }}{% endfor %}{% endif %}{% endfor %}", "", "");
  ASSERT_TRUE(mapping.ok()) << mapping.status().to_string();
  EXPECT_FALSE(mapping->string_arguments());
  EXPECT_EQ(*mapping->apply(msgs, false), R"({"city": "Paris", "n": [1, 2]}|True)");
  auto text = ChatTemplate::create(body + "{{ '```json\n' + c.function.arguments + '\n```' }}{% endfor %}{% endif %}{% endfor %}", "", "");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_TRUE(text->string_arguments());
  EXPECT_EQ(*text->apply(msgs, false), "```json\n{\"city\": \"Paris\", \"n\": [1, 2]}\n```");
  EXPECT_EQ(python_json_dumps(nlohmann::ordered_json::parse(R"({"b": {"x": "é"}, "a": [true, null, 1.5]})")),
            R"({"b": {"x": "é"}, "a": [true, null, 1.5]})");
}

TEST(ChatTemplate, MissingFileIsNotFound) {
  auto t = ChatTemplate::from_file("/nonexistent/template.jinja", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace sluice::server
