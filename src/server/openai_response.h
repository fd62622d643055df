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

#include <nlohmann/json_fwd.hpp>

#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace sluice::server {

struct TokenLogprob {
  std::string token;  // the token's text (its bytes; may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
};

// What one of the n outputs produced (whole, or since the last chunk).
struct ChoiceOutput {
  int32_t index = 0;
  std::string text;                  // chat: content (without the tool calls' text)
  std::vector<ToolCall> tool_calls;  // chat: calls parsed from the output
  int32_t first_call_index = 0;      // in a delta: the index of tool_calls[0] in the choice
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
  // With token_ids: the prompt as the server tokenized it (the chat template's
  // text for chat), sent as "prompt_token_ids" in a non-streamed response.
  std::vector<int32_t> prompt_token_ids;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The logprobs object of one choice. text_offset_start: the choice's text length
// before these tokens (completions' text_offset).
nlohmann::json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& lps, size_t text_offset_start);

// The whole non-streaming response. A chat choice with tool calls has
// message.tool_calls, and content null when the model wrote no other text.
// With info.token_ids, each choice has "token_ids" and the response
// "prompt_token_ids".
nlohmann::json response_json(const ResponseInfo& info, const std::vector<ChoiceOutput>& choices,
                             const nlohmann::json& usage);

// One stream chunk for one choice. `first`: the choice's first chunk (chat sends
// the role then). text_offset_start as for logprobs_json. Tool calls are not in
// it: they go in chunks of their own (tool_call_chunk_json).
nlohmann::json chunk_json(const ResponseInfo& info, const ChoiceOutput& delta, bool first, size_t text_offset_start);

// A chat chunk with one tool-call delta. Each call is sent as two: first
// {index, id, type: "function", function: {name, arguments: ""}}, then
// (arguments_part) {index, function: {arguments}}. `first`: the choice's
// first chunk (role "assistant", content null).
nlohmann::json tool_call_chunk_json(const ResponseInfo& info, int32_t choice_index, int32_t call_index,
                                    const ToolCall& call, bool arguments_part, bool first);

// The last chunk when stream_options.include_usage: no choices, only usage.
nlohmann::json usage_chunk_json(const ResponseInfo& info, const nlohmann::json& usage);

}  // namespace sluice::server
