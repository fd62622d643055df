// The pure request builder: every refusal and the built engine request, from
// the body alone (the stories260K tokenizer; skipped without ../shared).
#include "server/generation_request.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer_test_util.h"

namespace sluice::server {
namespace {

class GenerationRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::shipped_model_path("stories260K.gguf");
    tok_ = std::move(testing::load_gguf_tokenizer(path).value());
    chat_ = ChatTemplate::create("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}", "<s>", "</s>").value();
  }
  std::variant<GenerationPlan, ApiError> build(Endpoint ep, const std::string& body, int64_t ctx = 64) {
    return build_generation_request(ep, body,
                                    {.tokenizer = *tok_, .chat = chat_, .ctx = ctx, .id = "m", .adapters = adapters_},
                                    77);
  }
  static const ApiError& error(const std::variant<GenerationPlan, ApiError>& v) { return std::get<ApiError>(v); }

  std::unique_ptr<Tokenizer> tok_;
  std::optional<ChatTemplate> chat_;
  std::vector<std::string> adapters_ = {"lora-a", "lora-b"};
};

TEST_F(GenerationRequestTest, BuildsTheEngineRequest) {
  auto v = build(Endpoint::kCompletions,
                 R"({"model":"m","prompt":"Once upon","max_tokens":5,"temperature":0,"stop":["."],"logprobs":2})");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(v)) << error(v).message;
  const GenerationPlan& p = std::get<GenerationPlan>(v);
  EXPECT_EQ(p.request.prompt, tok_->encode("Once upon", true, false));
  EXPECT_EQ(p.n_prompt, static_cast<int64_t>(p.request.prompt.size()));
  EXPECT_EQ(p.request.max_tokens, 5);
  EXPECT_EQ(p.request.sampling.temperature, 0.0f);
  EXPECT_EQ(p.request.sampling.seed, 77u);  // none in the body: the caller's
  EXPECT_EQ(p.request.stop_strings, std::vector<std::string>{"."});
  EXPECT_EQ(p.request.top_logprobs, 2);
  EXPECT_TRUE(p.info.logprobs);
  EXPECT_EQ(p.info.model, "m");
  EXPECT_FALSE(p.stream);
}

TEST_F(GenerationRequestTest, ChatGoesThroughTheTemplateAndDefaultsToTheRoomLeft) {
  auto v = build(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}],"seed":3,"stream":true})");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(v)) << error(v).message;
  const GenerationPlan& p = std::get<GenerationPlan>(v);
  EXPECT_EQ(p.request.prompt, tokenize_chat_prompt(*tok_, "user: hi\n"));
  EXPECT_EQ(p.request.max_tokens, 64 - p.n_prompt);
  EXPECT_EQ(p.request.sampling.seed, 3u);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.info.prompt_token_ids.empty());
  // return_token_ids: the response will carry the prompt's ids as tokenized.
  auto with_ids = build(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}],"return_token_ids":true})");
  ASSERT_TRUE(std::holds_alternative<GenerationPlan>(with_ids)) << error(with_ids).message;
  EXPECT_EQ(std::get<GenerationPlan>(with_ids).info.prompt_token_ids, tokenize_chat_prompt(*tok_, "user: hi\n"));
}

// The model field picks a LoRA adapter served beside the base, or none.
TEST_F(GenerationRequestTest, TheModelFieldPicksTheAdapter) {
  auto loras = [&](const std::string& body) {
    auto v = build(Endpoint::kCompletions, body);
    EXPECT_TRUE(std::holds_alternative<GenerationPlan>(v)) << error(v).message;
    const GenerationPlan& p = std::get<GenerationPlan>(v);
    return std::make_pair(p.request.loras, p.info.model);
  };
  EXPECT_EQ(loras(R"({"model":"m","prompt":"a"})"), std::make_pair(std::vector<int32_t>{}, std::string("m")));
  EXPECT_EQ(loras(R"({"prompt":"a"})"), std::make_pair(std::vector<int32_t>{}, std::string("m")));
  EXPECT_EQ(loras(R"({"model":"","prompt":"a"})"), std::make_pair(std::vector<int32_t>{}, std::string("m")));
  EXPECT_EQ(loras(R"({"model":"lora-b","prompt":"a"})"), std::make_pair(std::vector<int32_t>{1}, std::string("lora-b")));
  EXPECT_EQ(loras(R"({"model":"lora-a","prompt":"a"})"), std::make_pair(std::vector<int32_t>{0}, std::string("lora-a")));
  const ApiError unknown = error(build(Endpoint::kCompletions, R"({"model":"lora-c","prompt":"a"})"));
  EXPECT_EQ(unknown.http_status, 404);
  EXPECT_EQ(unknown.code, "model_not_found");
  EXPECT_NE(unknown.message.find("serves 'm', 'lora-a', 'lora-b'"), std::string::npos) << unknown.message;
}

TEST_F(GenerationRequestTest, RefusesWithTheRightStatusAndField) {
  EXPECT_EQ(error(build(Endpoint::kCompletions, R"({"model":"other","prompt":"a"})")).http_status, 404);
  EXPECT_EQ(error(build(Endpoint::kCompletions, R"({"model":"m","prompt":[1, 99999]})")).param, "prompt");
  const ApiError long_prompt = error(build(Endpoint::kCompletions, R"({"model":"m","prompt":"Once upon a time"})", 3));
  EXPECT_EQ(long_prompt.code, "context_length_exceeded");
  const ApiError too_many = error(build(Endpoint::kCompletions, R"({"model":"m","prompt":"a","max_tokens":500})"));
  EXPECT_EQ(too_many.param, "max_tokens");
  EXPECT_EQ(too_many.code, "context_length_exceeded");
  EXPECT_EQ(error(build(Endpoint::kCompletions, R"({"model":"m","prompt":"a","n":99})")).param, "n");
}

TEST_F(GenerationRequestTest, ToolsReachTheTemplateAsToolChoiceSays) {
  chat_ = ChatTemplate::create(
              "{% if tools is defined %}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% endif %}"
              "{% for m in messages %}{{ m.role }}: {{ m.content }}"
              "{% for c in m.tool_calls %}<{{ c.function.name }} {{ c.function.arguments.city }}>{% endfor %}|{% endfor %}",
              "<s>", "</s>")
              .value();
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}])";
  const std::string msgs =
      R"("messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[)"
      R"({"id":"c1","type":"function","function":{"name":"a","arguments":"{\"city\": \"Paris\"}"}}]},)"
      R"({"role":"tool","tool_call_id":"c1","content":"sunny"}])";
  auto prompt_of = [&](const std::string& extra, ToolParsing* parsing) {
    auto v = build_generation_request(Endpoint::kChat, R"({"model":"m",)" + msgs + "," + tools + extra + "}",
                                      {.tokenizer = *tok_, .chat = chat_, .ctx = 256, .id = "m",
                                       .tool_format = ToolCallFormat::kHermes},
                                      1);
    if (!std::holds_alternative<GenerationPlan>(v)) {
      ADD_FAILURE() << error(v).message;
      return std::vector<int32_t>();
    }
    *parsing = std::get<GenerationPlan>(v).tools;
    return std::get<GenerationPlan>(v).request.prompt;
  };
  // Content null reaches the template as none (printed "None").
  const std::string convo = "user: hi|assistant: None<a Paris>|tool: sunny|";
  ToolParsing p;
  EXPECT_EQ(prompt_of("", &p), tokenize_chat_prompt(*tok_, "[a][b]" + convo));
  EXPECT_EQ(p.format, ToolCallFormat::kHermes);
  EXPECT_EQ(p.max_calls, 1 << 30);
  EXPECT_EQ(prompt_of(R"(,"tool_choice":"required","parallel_tool_calls":false)", &p),
            tokenize_chat_prompt(*tok_, "[a][b]" + convo));
  EXPECT_EQ(p.max_calls, 1);
  EXPECT_EQ(prompt_of(R"(,"tool_choice":{"type":"function","function":{"name":"b"}})", &p),
            tokenize_chat_prompt(*tok_, "[b]" + convo));
  EXPECT_EQ(prompt_of(R"(,"tool_choice":"none")", &p), tokenize_chat_prompt(*tok_, convo));
  EXPECT_EQ(p.format, ToolCallFormat::kNone);
}

TEST_F(GenerationRequestTest, ChatWithoutATemplateIsRefused) {
  chat_.reset();
  const ApiError e = error(build(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"));
  EXPECT_EQ(e.code, "chat_template_missing");
  EXPECT_EQ(e.http_status, 400);
}

}  // namespace
}  // namespace sluice::server
