// OpenAI request schemas: parse and validate the JSON bodies of
// POST /v1/completions and POST /v1/chat/completions, and the OpenAI error body.
//
// Validation here is everything that can be judged from the body alone: JSON
// syntax, field types, ranges (n, temperature, top_p, penalties, logprobs,
// stop, tools, tool_choice), and features sluice refuses (echo, suffix, best_of > n,
// logit_bias, the deprecated functions/function_call, image content). Checks that need the model (model name, prompt length
// against the context, max_tokens against what is left) are the server's.
// Plain functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_template.h"

namespace sluice::server {

// An OpenAI-style error: the HTTP status and the {"error": {...}} body.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";  // invalid_request_error, authentication_error, not_found_error, ...
  std::string code;                            // machine-readable: invalid_type, context_length_exceeded, ...
  std::string param;                           // the offending field, or "" (null in JSON)
  std::string message;

  // {"error": {"message", "type", "param", "code"}}
  nlohmann::json body() const;
};

// 400 invalid_request_error.
ApiError invalid_request(std::string param, std::string message, std::string code = "invalid_value");
// Any status, type and code.
ApiError api_error(int status, std::string type, std::string code, std::string message, std::string param = "");

enum class Endpoint { kCompletions, kChat };
const char* endpoint_name(Endpoint e);  // "completions", "chat.completions"

constexpr int32_t kMaxChoices = 16;       // n
constexpr int32_t kMaxStopStrings = 4;
constexpr int32_t kMaxStopTokenIds = 64;
constexpr int32_t kMaxCompletionLogprobs = 5;
constexpr int32_t kMaxChatTopLogprobs = 20;
constexpr int32_t kMaxTools = 128;

// What tool_choice asks for. Without constrained decoding none of them can
// force a call: kNone leaves the tools out of the prompt and the output
// unparsed; kAuto and kRequired give the template every tool; kNamed gives it
// only the named one. Output is parsed for calls in all but kNone.
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                   // as sent; "" if absent
  // Completions: the prompt as text, or as token ids.
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // Chat: the conversation.
  std::vector<ChatMessage> messages;
  // Chat: the tools, validated, as the template gets them (null: none given).
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;        // kNamed: the function
  bool parallel_tool_calls = true;     // false: only the first parsed call is returned
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  int32_t n = 1;
  std::optional<int64_t> max_tokens;    // absent: the endpoint's default
  float temperature = 1.0f;             // 0: greedy
  float top_p = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  int32_t top_logprobs = -1;            // -1: no logprobs; else alternatives per token
  // Extensions (not in the OpenAI schema, as in vLLM): token ids that end a
  // choice (as end-of-generation tokens do; not part of it); keep going past
  // end-of-generation tokens; return the generated token ids per choice.
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool return_token_ids = false;
};

// Parses a request body. Malformed JSON, wrong types and out-of-range values
// give a 400 ApiError naming the field.
std::variant<GenerationRequest, ApiError> parse_generation_request(Endpoint endpoint, std::string_view body);

}  // namespace sluice::server
