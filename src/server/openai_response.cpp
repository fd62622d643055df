#include "server/openai_response.h"

#include <nlohmann/json.hpp>

namespace sluice::server {

using json = nlohmann::json;

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json finish(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json header(const ResponseInfo& info, const char* object) {
  return {{"id", info.id}, {"object", object}, {"created", info.created}, {"model", info.model}};
}

}  // namespace

json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& lps, size_t text_offset_start) {
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const auto& lp : lps) {
      json top = json::array();
      for (const auto& [t, l] : lp.top) top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes_of(t)}});
      content.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"bytes", bytes_of(lp.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  size_t offset = text_offset_start;
  for (const auto& lp : lps) {
    tokens.push_back(lp.token);
    token_logprobs.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [t, l] : lp.top) top[t] = l;
    top_logprobs.push_back(top);
    offsets.push_back(offset);
    offset += lp.token.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", offsets}};
}

json response_json(const ResponseInfo& info, const std::vector<ChoiceOutput>& choices, const json& usage) {
  const bool chat = info.endpoint == Endpoint::kChat;
  json out = header(info, chat ? "chat.completion" : "text_completion");
  json arr = json::array();
  for (const auto& c : choices) {
    json choice = {{"index", c.index}};
    if (chat) {
      json message = {{"role", "assistant"}};
      message["content"] = c.text.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.text);
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCall& t : c.tool_calls) calls.push_back(tool_call_json(t));
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = info.logprobs ? logprobs_json(info.endpoint, c.logprobs, 0) : json(nullptr);
    choice["finish_reason"] = finish(c.finish_reason);
    if (info.token_ids) choice["token_ids"] = c.token_ids;
    arr.push_back(std::move(choice));
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage;
  if (info.token_ids) out["prompt_token_ids"] = info.prompt_token_ids;
  return out;
}

json chunk_json(const ResponseInfo& info, const ChoiceOutput& delta, bool first, size_t text_offset_start) {
  const bool chat = info.endpoint == Endpoint::kChat;
  json out = header(info, chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", delta.index}};
  if (chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.text.empty() || (first && delta.finish_reason.empty())) d["content"] = delta.text;
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] =
      info.logprobs && !delta.logprobs.empty() ? logprobs_json(info.endpoint, delta.logprobs, text_offset_start) : json(nullptr);
  choice["finish_reason"] = finish(delta.finish_reason);
  if (info.token_ids) choice["token_ids"] = delta.token_ids;
  out["choices"] = json::array({std::move(choice)});
  return out;
}

json tool_call_chunk_json(const ResponseInfo& info, int32_t choice_index, int32_t call_index, const ToolCall& call,
                          bool arguments_part, bool first) {
  json out = header(info, "chat.completion.chunk");
  json d = json::object();
  if (first) {
    d["role"] = "assistant";
    d["content"] = nullptr;
  }
  json entry = {{"index", call_index}};
  if (arguments_part) {
    entry["function"] = {{"arguments", call.arguments}};
  } else {
    entry["id"] = call.id;
    entry["type"] = "function";
    entry["function"] = {{"name", call.name}, {"arguments", ""}};
  }
  d["tool_calls"] = json::array({std::move(entry)});
  out["choices"] = json::array({{{"index", choice_index}, {"delta", std::move(d)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return out;
}

json usage_chunk_json(const ResponseInfo& info, const json& usage) {
  json out = header(info, info.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage;
  return out;
}

}  // namespace sluice::server
