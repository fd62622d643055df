#include "server/generation_request.h"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace sluice::server {

std::variant<std::vector<int32_t>, ApiError> resolve_model(std::string_view requested, std::string_view base_id,
                                                           std::span<const std::string> adapters) {
  if (requested.empty() || requested == base_id) return std::vector<int32_t>{};
  for (size_t i = 0; i < adapters.size(); ++i)
    if (requested == adapters[i]) return std::vector<int32_t>{static_cast<int32_t>(i)};
  std::string known = fmt::format("'{}'", base_id);
  for (const std::string& a : adapters) known += fmt::format(", '{}'", a);
  return api_error(404, "invalid_request_error", "model_not_found",
                   fmt::format("the model '{}' does not exist; this server serves {}", requested, known), "model");
}

std::variant<GenerationPlan, ApiError> build_generation_request(Endpoint ep, std::string_view body,
                                                                const ServedModel& model, uint64_t seed) {
  auto parsed = parse_generation_request(ep, body);
  if (const ApiError* e = std::get_if<ApiError>(&parsed)) return *e;
  GenerationRequest& g = std::get<GenerationRequest>(parsed);
  auto loras = resolve_model(g.model, model.id, model.adapters);
  if (const ApiError* e = std::get_if<ApiError>(&loras)) return *e;

  const Tokenizer& tok = model.tokenizer;
  std::vector<int32_t> prompt;
  if (ep == Endpoint::kChat) {
    if (!model.chat)
      return invalid_request("messages", "this model has no chat template; start the server with --chat-template FILE",
                             "chat_template_missing");
    ChatOptions options{.add_generation_prompt = true};
    if (!g.tools.is_null() && g.tool_choice != ToolChoice::kNone) {
      options.tools = nlohmann::ordered_json::array();
      for (const auto& t : g.tools)
        if (g.tool_choice != ToolChoice::kNamed || t["function"]["name"] == g.tool_choice_name) options.tools.push_back(t);
    }
    auto text = model.chat->apply(g.messages, options);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kUnimplemented)
        return api_error(500, "server_error", "chat_template_unsupported", text.status().message());
      return invalid_request("messages", text.status().message());
    }
    prompt = tokenize_chat_prompt(tok, *text);
  } else if (g.prompt_is_ids) {
    for (int32_t id : g.prompt_ids)
      if (id >= tok.n_vocab())
        return invalid_request("prompt", fmt::format("token id {} is outside the vocabulary of {}", id, tok.n_vocab()));
    prompt = g.prompt_ids;
  } else {
    prompt = tok.encode(g.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  if (prompt.empty()) return invalid_request("prompt", "the prompt is empty and the model adds no BOS token");
  const int64_t ctx = model.ctx;
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= ctx)
    return invalid_request(ep == Endpoint::kChat ? "messages" : "prompt",
                           fmt::format("this model's maximum context length is {} tokens, but the prompt has {} tokens",
                                       ctx, n_prompt),
                           "context_length_exceeded");
  const int64_t room = ctx - n_prompt;
  const int64_t max_tokens = g.max_tokens.value_or(ep == Endpoint::kChat ? room : std::min<int64_t>(16, room));
  if (max_tokens > room)
    return invalid_request("max_tokens",
                           fmt::format("this model's maximum context length is {} tokens; you requested {} tokens "
                                       "({} in the prompt, {} for the completion)",
                                       ctx, n_prompt + max_tokens, n_prompt, max_tokens),
                           "context_length_exceeded");

  for (int32_t id : g.stop_token_ids)
    if (id >= tok.n_vocab())
      return invalid_request("stop_token_ids",
                             fmt::format("token id {} is outside the vocabulary of {}", id, tok.n_vocab()));

  GenerationPlan plan{.n_prompt = n_prompt, .stream = g.stream, .include_usage = g.include_usage};
  if (ep == Endpoint::kChat && !g.tools.is_null() && g.tool_choice != ToolChoice::kNone)
    plan.tools = ToolParsing{.format = model.tool_format, .max_calls = g.parallel_tool_calls ? 1 << 30 : 1};
  Request& r = plan.request;
  r.prompt = std::move(prompt);
  r.max_tokens = static_cast<int32_t>(max_tokens);
  r.n = g.n;
  r.sampling = SamplingParams{.temperature = g.temperature,
                              .top_k = 0,
                              .top_p = g.top_p,
                              .min_p = 0.0f,
                              .repeat_penalty = 1.0f,
                              .repeat_last_n = -1,
                              .frequency_penalty = g.frequency_penalty,
                              .presence_penalty = g.presence_penalty,
                              .seed = g.seed ? static_cast<uint64_t>(*g.seed) : seed};
  r.stop_strings = g.stop;
  r.stop_tokens = g.stop_token_ids;
  r.ignore_eos = g.ignore_eos;
  r.top_logprobs = g.top_logprobs;
  r.loras = std::move(std::get<std::vector<int32_t>>(loras));
  plan.info = ResponseInfo{.endpoint = ep, .model = g.model.empty() ? model.id : g.model, .logprobs = g.top_logprobs >= 0,
                           .token_ids = g.return_token_ids};
  if (g.return_token_ids) plan.info.prompt_token_ids = r.prompt;
  return plan;
}

}  // namespace sluice::server
