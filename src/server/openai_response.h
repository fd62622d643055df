// OpenAI response objects: completions, chat completions, their stream chunks,
// usage and logprobs, built from what the engine reported per choice.
//
//   /v1/completions       object "text_completion", choices[i].text,
//                         logprobs {tokens, token_logprobs, top_logprobs, text_offset}
//   /v1/chat/completions  object "chat.completion" / "chat.completion.chunk",
//                         choices[i].message | delta, logprobs {content: [...]}
// Plain functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace sluice::server {

struct TokenLogprob {
  std::string token;  // the token's text (its bytes; may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
};

// What one of the n outputs produced (whole, or since the last chunk).
struct ChoiceOutput {
  int32_t index = 0;
  std::string text;
  std::string finish_reason;  // "" while unfinished (null in JSON)
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
};

struct ResponseInfo {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  bool logprobs = false;   // include logprobs objects
  bool token_ids = false;  // include the token_ids extension
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The logprobs object of one choice. text_offset_start: the choice's text length
// before these tokens (completions' text_offset).
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& lps, size_t text_offset_start);

// The whole non-streaming response.
nlohmann::json response_json(const ResponseInfo& info, const std::vector<ChoiceOutput>& choices,
                             const nlohmann::json& usage);

// One stream chunk for one choice. `first`: the choice's first chunk (chat sends
// the role then). text_offset_start as for logprobs_json.
nlohmann::json chunk_json(const ResponseInfo& info, const ChoiceOutput& delta, bool first, size_t text_offset_start);

// The last chunk when stream_options.include_usage: no choices, only usage.
nlohmann::json usage_chunk_json(const ResponseInfo& info, const nlohmann::json& usage);

}  // namespace sluice::server
