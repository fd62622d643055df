// OpenAI request bodies through the pure request builder: schema and range
// checks, the model name, the chat template, tokenization and context checks.
//
// Input: | endpoint byte (even: completions, odd: chat) | JSON body ... |
// The served model: the SPM vocabulary of the tokenizer harness, a
// message-by-message chat template, 64 positions, name "m". Every input yields a
// plan or an ApiError with an HTTP status and a message; a plan's prompt is
// non-empty, in the vocabulary and fits the context with its max_tokens.
#include <memory>
#include <optional>
#include <string_view>

#include "fuzz_vocab.h"
#include "harnesses.h"
#include "server/generation_request.h"
#include "tokenizer/tokenizer.h"

namespace sluice::fuzz {
namespace {

constexpr int64_t kCtx = 64;

struct Served {
  std::unique_ptr<Tokenizer> tok;
  std::optional<server::ChatTemplate> chat;
};

const Served& served() {
  static const Served* s = [] {
    auto* s = new Served;
    s->tok = std::move(Tokenizer::from_metadata(spm_vocab_metadata()).value());
    s->chat = std::move(server::ChatTemplate::create(
                            "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                            "{% if add_generation_prompt %}[assistant] {% endif %}",
                            "<s>", "</s>")
                            .value());
    return s;
  }();
  return *s;
}

}  // namespace

void fuzz_openai_request(const uint8_t* data, size_t size) {
  if (size == 0) {
    (void)served();
    return;
  }
  const server::Endpoint endpoint = data[0] & 1 ? server::Endpoint::kChat : server::Endpoint::kCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const Served& s = served();
  const server::ServedModel model{.tokenizer = *s.tok, .chat = s.chat, .ctx = kCtx, .id = "m"};
  std::variant<server::GenerationPlan, server::ApiError> v = server::build_generation_request(endpoint, body, model, 7);
  if (const auto* err = std::get_if<server::ApiError>(&v)) {
    FUZZ_CHECK(err->http_status >= 400 && err->http_status < 600);
    FUZZ_CHECK(!err->message.empty());
    (void)err->body().dump();
    return;
  }
  const server::GenerationPlan& plan = std::get<server::GenerationPlan>(v);
  FUZZ_CHECK(!plan.request.prompt.empty());
  FUZZ_CHECK(plan.n_prompt == static_cast<int64_t>(plan.request.prompt.size()));
  for (int32_t id : plan.request.prompt) FUZZ_CHECK(id >= 0 && id < s.tok->n_vocab());
  FUZZ_CHECK(plan.request.max_tokens >= 1 && plan.n_prompt + plan.request.max_tokens <= kCtx);
}

}  // namespace sluice::fuzz
