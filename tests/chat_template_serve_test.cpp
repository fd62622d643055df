// `sluice serve --chat-template` with each of the 17 real templates of
// ../shared/chat-templates: for every conversation of expected.json, the prompt
// the server tokenizes (usage.prompt_tokens, and the ids it reports with
// return_token_ids) is the text Python's jinja2 renders, tokenized by the same
// model's tokenizer; where jinja2 raises, the server answers 400 with the
// template's message. A template keyed by integers serves jinja2's prompt. And
// a template that runs away hits the render's wall-clock limit: the request
// gets its 400 promptly, and the server goes on.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/test_data.h"
#include "server/chat_template.h"
#include "jinja/jinja_limits.h"
#include "server_process.h"
#include "tokenizer/tokenizer_test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;
using testing::ServerProcess;

const std::string kModel = testing::model_path("stories260K/stories260K.gguf");

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The date strftime_now("%d %b %Y") gives in the server now (its clock is the
// real one; expected.json's is 2026-01-02).
std::string today() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof buf, "%d %b %Y", &tm));
}

// The request an OpenAI client sends for a conversation of expected.json: tool
// call arguments as JSON strings, one token to generate, the prompt's ids back.
ojson request_for(const std::string& model, const ojson& conv) {
  ojson body = {{"model", model}, {"messages", conv.at("messages")}, {"max_tokens", 1}, {"temperature", 0},
                {"return_token_ids", true}};
  if (conv.contains("tools")) body["tools"] = conv.at("tools");
  for (auto& m : body["messages"]) {
    if (!m.contains("tool_calls")) continue;
    for (auto& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
  }
  return body;
}

TEST(ChatTemplateServe, EveryTemplateTokenizesWhatJinja2Renders) {
  const std::string dir = testing::shared_dir() + "/chat-templates";
  SKIP_UNLESS_EXISTS(kModel);
  SKIP_UNLESS_EXISTS(dir + "/expected.json");
  auto tok = testing::load_gguf_tokenizer(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const ojson all = ojson::parse(read_text(dir + "/expected.json"));
  const ojson& conversations = all.at("conversations");
  ASSERT_EQ(all.at("conventions").at("bos_token"), (*tok)->token_text((*tok)->bos_id()));
  int n_templates = 0, n_compared = 0, n_refused = 0;
  for (const auto& [name, cases] : all.at("templates").items()) {
    SCOPED_TRACE(name);
    // The tool conversations run to a few thousand tokens of this 512-piece vocabulary.
    ServerProcess srv(kModel, {"--chat-template", dir + "/" + name, "-c", "8192"});
    ASSERT_NE(srv.port(), 0) << srv.log();
    ++n_templates;
    httplib::Client c("127.0.0.1", srv.port());
    c.set_read_timeout(60);
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models && models->status == 200);
    const std::string model = ojson::parse(models->body)["data"][0]["id"];
    for (const auto& [case_name, expected] : cases.items()) {
      SCOPED_TRACE(case_name);
      const ojson& conv = conversations.at(case_name);
      // The server always adds the generation prompt; jinja2's not_judged cases have no text to compare.
      if (!conv.value("add_generation_prompt", true) || expected.contains("not_judged")) continue;
      const std::string body = request_for(model, conv).dump();
      const std::string date_before = today();
      auto r = c.Post("/v1/chat/completions", body, "application/json");
      ASSERT_TRUE(r) << "no response";
      const ojson j = ojson::parse(r->body, nullptr, false);
      if (expected.contains("error")) {
        // "TemplateError: msg" / "UndefinedError: 'x' is undefined": the server names the part after the type.
        const std::string want = expected.at("error").get<std::string>();
        EXPECT_EQ(r->status, 400) << r->body;
        ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
        EXPECT_NE(j["error"]["message"].get<std::string>().find(want.substr(want.find(": ") + 2)), std::string::npos)
            << r->body;
        ++n_refused;
        continue;
      }
      ASSERT_EQ(r->status, 200) << r->body;
      if (today() != date_before) GTEST_SKIP() << "the date changed during the request; run again";
      std::string text = expected.at("text").get<std::string>();
      for (size_t p = text.find("02 Jan 2026"); p != std::string::npos; p = text.find("02 Jan 2026", p + 1))
        text.replace(p, 11, date_before);
      const std::vector<int32_t> want = server::tokenize_chat_prompt(**tok, text);
      EXPECT_EQ(j["usage"]["prompt_tokens"], want.size());
      EXPECT_EQ(j["prompt_token_ids"].get<std::vector<int32_t>>(), want);
      ++n_compared;
    }
    EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
  }
  EXPECT_EQ(n_templates, 17);
  EXPECT_GE(n_compared, 70);
  EXPECT_GE(n_refused, 8);
  std::printf("%d templates: %d prompts as jinja2 renders them, %d refusals with the template's message\n", n_templates,
              n_compared, n_refused);
}

// A template with an integer-keyed dict literal walked by dictsort (as 2025
// reasoning models' templates have): every request used to get 400 ("'<' not
// supported between instances of 'int' and 'str'"); now the prompt is jinja2's.
TEST(ChatTemplateServe, IntegerKeyedDictTemplateServesJinja2sPrompt) {
  SKIP_UNLESS_EXISTS(kModel);
  auto tok = testing::load_gguf_tokenizer(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string path = ::testing::TempDir() + "/sluice_int_keys_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << "{%- set effort_by_budget = {32768: 'high', 1024: 'low', 8192: 'medium', 0: 'none'} -%}\n"
                         "{%- set effort = namespace(name='none') -%}\n"
                         "{%- for budget, name in effort_by_budget | dictsort -%}\n"
                         "    {%- if (thinking_budget | default(0)) >= budget -%}{%- set effort.name = name -%}{%- endif -%}\n"
                         "{%- endfor -%}\n"
                         "{{- bos_token -}}\n"
                         "{%- for message in messages -%}\n"
                         "    {{- '<|' + message.role + '|>' + message.content + '<|end|>\\n' -}}\n"
                         "{%- endfor -%}\n"
                         "{%- if add_generation_prompt -%}\n"
                         "    {{- '<|assistant|><|effort:' + effort.name + '|>' -}}\n"
                         "{%- endif -%}\n";
  ServerProcess srv(kModel, {"--chat-template", path});
  std::remove(path.c_str());
  ASSERT_NE(srv.port(), 0) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(60);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const ojson body = {{"model", ojson::parse(models->body)["data"][0]["id"]},
                      {"messages", ojson::parse(R"([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                          {"role": "user", "content": "Sum 2+2"}])")},
                      {"max_tokens", 1}, {"return_token_ids", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r) << "no response";
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string jinja2_text =  // jinja2 3.1, HF's settings, bos "<s>"
      "<s><|system|>Be brief.<|end|>\n<|user|>Hi<|end|>\n<|assistant|>Hello.<|end|>\n<|user|>Sum 2+2<|end|>\n"
      "<|assistant|><|effort:none|>";
  EXPECT_EQ(ojson::parse(r->body)["prompt_token_ids"].get<std::vector<int32_t>>(),
            server::tokenize_chat_prompt(**tok, jinja2_text));
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

// A template that would spend minutes on one conversation (a million-byte string
// built in each of 400,000 iterations: inside every count limit) is stopped by
// kMaxRenderMillis: that request gets 400 in about that time, the next one 200.
TEST(ChatTemplateServe, RunawayTemplateGets400WithinTheRenderTimeLimit) {
  SKIP_UNLESS_EXISTS(kModel);
  const std::string path = ::testing::TempDir() + "/sluice_runaway_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << "{%- if messages[-1].content == 'spin' -%}"
                         "{%- for i in range(400000) -%}{%- set s = 'x' * 1000000 -%}{%- endfor -%}"
                         "{%- endif -%}"
                         "{%- for m in messages -%}{{ m.role }}: {{ m.content }}\n{%- endfor -%}";
  ServerProcess srv(kModel, {"--chat-template", path});
  std::remove(path.c_str());
  ASSERT_NE(srv.port(), 0) << srv.log();
  httplib::Client c("127.0.0.1", srv.port());
  c.set_read_timeout(120);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models && models->status == 200);
  const std::string model = ojson::parse(models->body)["data"][0]["id"];
  auto ask = [&](const std::string& content) {
    const ojson body = {{"model", model}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 2}};
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  const auto start = std::chrono::steady_clock::now();
  auto r = ask("spin");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("kMaxRenderMillis"), std::string::npos) << r->body;
  EXPECT_LT(seconds, jinja::kMaxRenderMillis / 1000.0 + 3.0);
  auto ok = ask("hello");
  ASSERT_TRUE(ok) << "no response";
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.log();
}

}  // namespace
}  // namespace sluice
