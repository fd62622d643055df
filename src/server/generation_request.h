// build_generation_request(): an OpenAI request body -> the engine Request it
// asks for, or the ApiError that refuses it. Pure: no engine, no I/O, so every
// refusal is testable from the body alone.
//
//   body -> parse_generation_request (schema, types, ranges)
//        -> the served model's name
//        -> prompt tokens: chat template (with the tools) + tokenizer (chat), ids or text (completions)
//        -> context checks (prompt < ctx, max_tokens within what is left)
//        -> Request (sampling, stop strings, logprobs) + what the response needs
// Thread-safe (reads its inputs only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "server/chat_template.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/tool_calls.h"
#include "sluice/engine.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::server {

// What the request is checked against.
struct ServedModel {
  const Tokenizer& tokenizer;
  const std::optional<ChatTemplate>& chat;  // nullopt: chat requests are refused
  int64_t ctx = 0;                          // positions per sequence
  std::string id;                           // the model name clients must send
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // how its output writes tool calls
};


struct GenerationPlan {
  Request request;        // for Engine::submit
  ResponseInfo info;      // for the response writers (id and created left to the caller)
  int64_t n_prompt = 0;
  bool stream = false;
  bool include_usage = false;
  ToolParsing tools;
};

// `seed` is used when the body gives none (the caller draws it).
std::variant<GenerationPlan, ApiError> build_generation_request(Endpoint endpoint, std::string_view body,
                                                                const ServedModel& model, uint64_t seed);

}  // namespace sluice::server
