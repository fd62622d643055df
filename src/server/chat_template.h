// ChatTemplate: turns OpenAI chat messages into the prompt text a model was
// trained on, by rendering the model's Jinja chat template (from the GGUF key
// `tokenizer.chat_template`, or a file given with --chat-template).
//
// The template sees what Hugging Face's apply_chat_template passes: `messages`
// (each with role and content, and tool_calls / tool_call_id / name when set),
// `tools` and `documents` when given (undefined otherwise), add_generation_prompt,
// bos_token and eos_token; globals as jinja.h lists.
//
// create() parses the template and renders a one-message conversation, so a
// template that uses something the renderer does not support fails at startup
// with kUnimplemented naming the construct, not on the first request.
//
// Tool-call arguments: HF templates take them as a mapping (`arguments | tojson`),
// a few concatenate them as a string (DeepSeek R1: '```json\n' + arguments).
// create() renders a probe call both ways and apply() passes arguments as the
// template can use them: a mapping, or JSON text as Python's json.dumps writes it.
// Immutable after creation; apply() is safe from several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/jinja.h"
#include "sluice/status.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::server {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool", ...
  std::string content;  // text parts already joined
  bool content_null = false;  // an assistant message with tool calls and content null: the template sees none
  // Assistant tool calls, as HF templates expect them: an array of
  // {"id", "type": "function", "function": {"name", "arguments": {...}}} with
  // the arguments a JSON object (an OpenAI client's JSON string parsed first).
  // Null: the message has none (the key is absent).
  nlohmann::ordered_json tool_calls;
  std::string tool_call_id;  // role "tool": the call this answers ("": absent)
  std::string name;          // role "tool": the function's name ("": absent)
};

struct ChatOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;      // array of {"type": "function", "function": {...}}; null: undefined
  nlohmann::ordered_json documents;  // array of objects; null: undefined
  std::optional<int64_t> now_unix;   // strftime_now's clock (UTC); unset: the real local time
};

class ChatTemplate {
 public:
  // `bos_token` and `eos_token` are the texts the template sees as variables.
  static StatusOr<ChatTemplate> create(std::string source, std::string bos_token, std::string eos_token);
  // Reads a template file (a raw Jinja template, as in tokenizer_config.json).
  static StatusOr<ChatTemplate> from_file(const std::string& path, std::string bos_token, std::string eos_token);

  // The prompt text. A template's raise_exception (e.g. roles that do not
  // alternate) is kInvalidArgument with the template's message.
  StatusOr<std::string> apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  StatusOr<std::string> apply(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  // The same from messages already in HF's JSON form (an array of objects).
  StatusOr<std::string> apply_json(const nlohmann::ordered_json& messages, const ChatOptions& options) const;
  const std::string& source() const { return source_; }
  // True when apply() passes tool-call arguments as JSON text (see above).
  bool string_arguments() const { return string_arguments_; }

 private:
  // Whether a call with arguments {"probe_arg": "probe_value"} renders them.
  bool renders_probe_call(bool as_string) const;

  ChatTemplate(std::string source, jinja::JinjaTemplate tmpl, std::string bos, std::string eos)
      : source_(std::move(source)), tmpl_(std::move(tmpl)), bos_(std::move(bos)), eos_(std::move(eos)) {}

  std::string source_;
  jinja::JinjaTemplate tmpl_;
  std::string bos_;
  std::string eos_;
  bool string_arguments_ = false;
};

// JSON text as Python's json.dumps writes it by default (", " and ": "), UTF-8 kept.
std::string python_json_dumps(const nlohmann::ordered_json& j);

// Token ids of a rendered chat prompt: special-token texts become their ids, and
// BOS is prepended when the tokenizer adds one and the text did not start with it.
std::vector<int32_t> tokenize_chat_prompt(const Tokenizer& tokenizer, const std::string& text);

}  // namespace sluice::server
