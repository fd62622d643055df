// build_generation_request(): an OpenAI request body -> the engine Request it
// asks for, or the ApiError that refuses it. Pure: no engine, no I/O, so every
// refusal is testable from the body alone.
//
//   body -> parse_generation_request (schema, types, ranges)
//        -> the served model's name: the base, or one of its LoRA adapters
//        -> prompt tokens: chat template (with the tools) + tokenizer (chat), ids or text (completions)
//        -> context checks (prompt < ctx, max_tokens within what is left)
//        -> Request (sampling, stop strings, logprobs) + what the response needs
// Thread-safe (reads its inputs only).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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
  std::string id;                           // the base model's name (also what "" or no model means)
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // how its output writes tool calls
  std::span<const std::string> adapters = {};  // LoRA adapters' ids: "model" picks one (Request::loras)
};

// The adapters a request's "model" asks for: none for the base's id or an
// empty model, {i} for adapters[i]; an unknown id is a 404 naming the known ones.
std::variant<std::vector<int32_t>, ApiError> resolve_model(std::string_view requested, std::string_view base_id,
                                                           std::span<const std::string> adapters);


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
