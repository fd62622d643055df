// Tool calls in model output: which format a model writes them in, and a
// parser that splits its text into content and OpenAI tool calls as it streams.
//
// Formats (what the model emits; the chat template tells which one):
//   llama3    {"name": "f", "parameters": {...}}  at the start of the output,
//             or after <|python_tag|>; several separated by ';' or whitespace
//   hermes    <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (Hermes 2/3, Qwen 2.5); repeated
//   mistral   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcdef123"}, ...]
//             (a bare [{"name": ...}] at the start too)
//   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>
//             ... <｜tool▁calls▁end｜>  (DeepSeek R1 / V3)
//
// How real files type the markers. llama.cpp's converter makes an HF added
// token CONTROL when it is "special": true or looks special (<|...|>, <｜...｜>),
// else USER_DEFINED; a SentencePiece model's own control pieces stay CONTROL:
//   Llama 3.1    <|python_tag|> (128010): special: true, like every Llama 3
//                added token -> control
//   Qwen 2.5     <tool_call> (151657), </tool_call> (151658): special: false
//                -> user-defined, so they are text
//   Mistral v3   [TOOL_CALLS] (5 in v0.3's 32768 vocabulary): a control token
//                (special: true; Mistral's own decoder skips it too) -> control
//   DeepSeek V3 / R1  <｜tool▁calls▁begin｜> ... <｜tool▁sep｜>: look special ->
//                control in GGUFs whatever tokenizer.json says
// sluice's HF importer types added tokens by "special" alone. Control tokens
// give no text when decoded (Tokenizer::token_to_piece), so the server hands
// their markers to the parser apart from the text, with push_marker() (see
// ChoiceAccumulator); user-defined markers arrive in the text. Either way the
// marker is recognised, and a marker given by push_marker never becomes content.
//
// ToolCallParser is fed the output text piece by piece. Plain text is released
// as content at once, except a tail that may begin a call marker (and trailing
// whitespace, which is dropped when a call follows). Text inside a call is
// held until the call is complete; a complete call whose body does not parse
// (or an unfinished one at the end) is released as content, and from then on
// everything is content. Calls get ids "call_" + 16 hex digits derived from the
// seed; Mistral calls keep the model's id, or get 9 letters and digits (its
// template refuses other ids). One parser per output; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sluice/status.h"

namespace sluice::server {

enum class ToolCallFormat { kNone, kLlama3, kHermes, kMistral, kDeepSeek };

// "none", "llama3", "hermes", "mistral", "deepseek".
const char* tool_call_format_name(ToolCallFormat f);
// The inverse of tool_call_format_name; kInvalidArgument naming the accepted names.
StatusOr<ToolCallFormat> parse_tool_call_format(std::string_view name);
// The format a chat template's model writes, from markers in its source:
// <｜tool▁calls▁begin｜> deepseek, <tool_call> hermes, an ipython role or
// <|python_tag|> with <|start_header_id|> llama3 (functionary's <function=
// excluded), [TOOL_CALLS] mistral; kNone otherwise.
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// How a chat request's output is read for tool calls.
struct ToolParsing {
  ToolCallFormat format = ToolCallFormat::kNone;  // kNone: no tools, tool_choice "none", or a model without a format
  int32_t max_calls = 1 << 30;                     // 1 when parallel_tool_calls is false
};

struct ToolCall {
  std::string id;         // "call_..." (or the model's own)
  std::string name;       // the function
  std::string arguments;  // a JSON object as text, as OpenAI sends it
};

// What a piece of output (or a whole one) turned into.
struct ParsedOutput {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

class ToolCallParser {
 public:
  // kNone passes all text through as content. Calls past max_calls (e.g. 1 for
  // parallel_tool_calls: false) are parsed and dropped.
  explicit ToolCallParser(ToolCallFormat format, uint64_t id_seed = 0, int32_t max_calls = 1 << 30);

  // Feeds the next piece of output; appends released content and completed
  // calls to *out.
  void push(std::string_view text, ParsedOutput* out);
  // Feeds a marker that a control token stands for (its text, e.g.
  // "<|python_tag|>"), at this point of the output. It is read as the text
  // would be, but never released as content (a failed call's text comes out
  // without it). Dropped when the format is kNone or parsing has failed.
  void push_marker(std::string_view marker, ParsedOutput* out);
  // End of output: releases what is held (unfinished calls as content).
  void finish(ParsedOutput* out);
  // Calls parsed so far (kept ones).
  int32_t n_calls() const { return n_calls_; }
  ToolCallFormat format() const { return format_; }

 private:
  enum class Mode { kPlain, kCall, kFailed };
  void drain(ParsedOutput* out, bool at_end);
  void drain_plain(ParsedOutput* out, bool at_end);
  // In kCall: parses what it can of buf_[pos_..]; false if more text is needed.
  bool step_call(ParsedOutput* out, bool at_end);
  void add_call(std::string name, std::string arguments, std::string id, ParsedOutput* out);
  void fail(ParsedOutput* out);  // the held call text becomes content
  // Appends buf_[from, to) to content, less the push_marker ranges; true if
  // that text has non-space characters.
  bool release_visible(size_t from, size_t to, ParsedOutput* out);

  ToolCallFormat format_;
  uint64_t id_seed_;
  int32_t max_calls_;
  Mode mode_ = Mode::kPlain;
  std::string buf_;         // text not yet released: buf_[pos_..]
  std::vector<std::pair<size_t, size_t>> hidden_;  // [begin, end) in buf_ of push_marker text, in order
  size_t pos_ = 0;
  size_t call_start_ = 0;   // where the held call text starts in buf_
  bool seen_text_ = false;  // non-whitespace content released (or a call parsed)
  bool in_calls_block_ = false;  // deepseek: inside <｜tool▁calls▁begin｜>
  size_t block_start_ = 0;       // deepseek: call_start_ when the block began (unchanged: no call yet)
  int32_t n_calls_ = 0;
  int32_t n_parsed_ = 0;
};

// Tools and tool-call arguments nest at most this deep (arrays and objects);
// deeper ones are refused (requests) or left as content (model output), so
// what reaches the template and JSON writers stays shallow.
constexpr int kMaxToolJsonDepth = 64;
// True if `j` nests at most max_depth arrays/objects deep (recursion bounded by it).
bool json_depth_within(const nlohmann::ordered_json& j, int max_depth);

// The whole output at once: push(text) + finish().
ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed = 0);

// True if `text` is one of the markers `format` is written with (the ones a
// vocabulary may hold as tokens): <|python_tag|>; <tool_call>, </tool_call>;
// [TOOL_CALLS]; DeepSeek's five <｜tool▁...｜> markers.
bool is_tool_call_marker(ToolCallFormat format, std::string_view text);

}  // namespace sluice::server
