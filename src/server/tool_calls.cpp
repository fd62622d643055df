#include "server/tool_calls.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/enum_names.h"

namespace sluice::server {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The markers that open a call region in plain text, per format.
std::vector<std::string_view> openers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLlama3: return {kPythonTag};
    case ToolCallFormat::kHermes: return {kHermesOpen};
    case ToolCallFormat::kMistral: return {kMistralOpen};
    case ToolCallFormat::kDeepSeek: return {kDsCallsBegin, kDsCallBegin};
    case ToolCallFormat::kNone: break;
  }
  return {};
}

// The character that opens a call when it is the first non-space text of the
// output (Llama 3's bare JSON object, Mistral's bare array), or 0.
char bare_opener(ToolCallFormat f) {
  if (f == ToolCallFormat::kLlama3) return '{';
  if (f == ToolCallFormat::kMistral) return '[';
  return 0;
}

// One past the end of the JSON object or array starting at s[i], or npos while
// it is incomplete. Only brackets outside strings count.
size_t json_value_end(std::string_view s, size_t i) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t j = i; j < s.size(); ++j) {
    const char c = s[j];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return j + 1;
    }
  }
  return std::string_view::npos;
}

// A call's arguments as OpenAI sends them (JSON text of an object), from an
// object or a string holding one; false if neither.
bool arguments_text(const ojson* args, std::string* out) {
  if (args == nullptr || args->is_null()) {
    *out = "{}";
    return true;
  }
  if (args->is_object()) {
    *out = args->dump();
    return true;
  }
  if (args->is_string()) {
    const ojson inner = ojson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!inner.is_object()) return false;
    *out = args->get<std::string>();
    return true;
  }
  return false;
}

// {"name": ..., <args_key>: {...}} (either "arguments" or "parameters").
bool call_from_object(const ojson& obj, std::string* name, std::string* args, std::string* id) {
  if (!obj.is_object() || !json_depth_within(obj, kMaxToolJsonDepth)) return false;
  auto n = obj.find("name");
  if (n == obj.end() || !n->is_string() || n->get<std::string>().empty()) return false;
  *name = n->get<std::string>();
  const ojson* a = nullptr;
  if (auto it = obj.find("arguments"); it != obj.end()) a = &*it;
  else if (auto p = obj.find("parameters"); p != obj.end()) a = &*p;
  if (!arguments_text(a, args)) return false;
  if (auto i = obj.find("id"); i != obj.end() && i->is_string()) *id = i->get<std::string>();
  return true;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool json_depth_within(const nlohmann::ordered_json& j, int max_depth) {
  if (!j.is_structured()) return true;
  if (max_depth <= 0) return false;
  for (const auto& v : j)
    if (!json_depth_within(v, max_depth - 1)) return false;
  return true;
}

constexpr EnumName<ToolCallFormat> kToolCallFormatNames[] = {
    {ToolCallFormat::kNone, "none"}, {ToolCallFormat::kLlama3, "llama3"}, {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kMistral, "mistral"}, {ToolCallFormat::kDeepSeek, "deepseek"}};

const char* tool_call_format_name(ToolCallFormat f) { return enum_name(f, kToolCallFormatNames); }

StatusOr<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kLlama3, ToolCallFormat::kHermes,
                           ToolCallFormat::kMistral, ToolCallFormat::kDeepSeek}) {
    if (name == tool_call_format_name(f)) return f;
  }
  return invalid_argument("unknown tool-call format '{}' (expected auto, none, llama3, hermes, mistral or deepseek)",
                          name);
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has(kDsCallsBegin)) return ToolCallFormat::kDeepSeek;
  if (has(kHermesOpen)) return ToolCallFormat::kHermes;
  if (has("<|start_header_id|>") && !has("<function=") && (has("ipython") || has(kPythonTag)))
    return ToolCallFormat::kLlama3;
  if (has(kMistralOpen)) return ToolCallFormat::kMistral;
  return ToolCallFormat::kNone;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, uint64_t id_seed, int32_t max_calls)
    : format_(format), id_seed_(id_seed), max_calls_(max_calls) {}

void ToolCallParser::push(std::string_view text, ParsedOutput* out) {
  if (format_ == ToolCallFormat::kNone || mode_ == Mode::kFailed) {
    out->content.append(text);
    return;
  }
  buf_.append(text);
  drain(out, /*at_end=*/false);
}

void ToolCallParser::push_marker(std::string_view marker, ParsedOutput* out) {
  if (format_ == ToolCallFormat::kNone || mode_ == Mode::kFailed || marker.empty()) return;
  hidden_.emplace_back(buf_.size(), buf_.size() + marker.size());
  buf_.append(marker);
  drain(out, /*at_end=*/false);
}

void ToolCallParser::finish(ParsedOutput* out) {
  if (format_ == ToolCallFormat::kNone || mode_ == Mode::kFailed) return;
  drain(out, /*at_end=*/true);
  buf_.clear();
  hidden_.clear();
  pos_ = 0;
}

bool ToolCallParser::release_visible(size_t from, size_t to, ParsedOutput* out) {
  bool text = false;
  const auto emit = [&](size_t a, size_t b) {
    if (a >= b) return;
    const std::string_view piece = std::string_view(buf_).substr(a, b - a);
    if (!trim(piece).empty()) text = true;
    out->content.append(piece);
  };
  size_t at = from;
  for (const auto& [begin, end] : hidden_) {
    if (end <= at) continue;
    if (begin >= to) break;
    emit(at, std::min(begin, to));
    at = std::max(at, end);
  }
  emit(at, to);
  return text;
}

void ToolCallParser::drain(ParsedOutput* out, bool at_end) {
  for (;;) {
    if (mode_ == Mode::kFailed) return;
    if (mode_ == Mode::kPlain) {
      const Mode before = mode_;
      drain_plain(out, at_end);
      if (mode_ == before) break;
      continue;
    }
    if (!step_call(out, at_end)) break;
  }
  // Keep the buffer small: drop what was released or consumed.
  if (mode_ == Mode::kPlain && pos_ > 0) {
    buf_.erase(0, pos_);
    size_t kept = 0;
    for (auto& [begin, end] : hidden_) {
      if (end <= pos_) continue;
      hidden_[kept++] = {begin > pos_ ? begin - pos_ : 0, end - pos_};
    }
    hidden_.resize(kept);
    pos_ = 0;
    call_start_ = 0;
  }
}

void ToolCallParser::drain_plain(ParsedOutput* out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  if (const char bare = bare_opener(format_); bare != 0 && !seen_text_) {
    size_t i = 0;
    while (i < rest.size() && (is_space(rest[i]) || (rest[i] == ';' && n_parsed_ > 0))) ++i;
    if (i == rest.size() && !at_end) return;  // only space so far: undecided
    // The bracket may begin a marker ("[TOOL_CALLS]"): then the marker rules.
    bool marker = false, maybe_marker = false;
    const std::string_view tail = i < rest.size() ? rest.substr(i) : std::string_view();
    for (std::string_view m : openers(format_)) {
      marker = marker || tail.substr(0, m.size()) == m;
      maybe_marker = maybe_marker || (tail.size() < m.size() && m.substr(0, tail.size()) == tail);
    }
    if (i < rest.size() && rest[i] == bare && maybe_marker && !at_end) return;
    if (i < rest.size() && rest[i] == bare && !marker) {
      call_start_ = pos_;
      pos_ += i;
      mode_ = Mode::kCall;
      return;
    }
  }
  // The earliest marker.
  size_t k = std::string_view::npos;
  std::string_view marker;
  for (std::string_view m : openers(format_)) {
    const size_t at = rest.find(m);
    if (at < k) k = at, marker = m;
  }
  auto release = [&](size_t n) {
    if (release_visible(pos_, pos_ + n, out)) seen_text_ = true;
    pos_ += n;
  };
  if (k != std::string_view::npos) {
    size_t ws = k;  // space before the marker goes with the call
    while (ws > 0 && is_space(rest[ws - 1])) --ws;
    release(ws);
    call_start_ = pos_;
    pos_ += k - ws;
    if (marker == kDsCallBegin) {
      in_calls_block_ = false;  // a lone call: step_call reads its begin marker
    } else {
      pos_ += marker.size();
      in_calls_block_ = marker == kDsCallsBegin;
      block_start_ = call_start_;
    }
    mode_ = Mode::kCall;
    return;
  }
  size_t end = rest.size();
  if (!at_end) {
    // Hold a tail that may begin a marker, and trailing space (dropped if a call follows).
    size_t hold = 0;
    for (std::string_view m : openers(format_)) {
      for (size_t len = std::min(m.size() - 1, rest.size()); len > hold; --len) {
        if (rest.substr(rest.size() - len) == m.substr(0, len)) {
          hold = len;
          break;
        }
      }
    }
    end -= hold;
    while (end > 0 && is_space(rest[end - 1])) --end;
  } else if (n_calls_ > 0) {
    while (end > 0 && is_space(rest[end - 1])) --end;  // space after the calls
  }
  release(end);
  if (at_end) pos_ = buf_.size();
}

bool ToolCallParser::step_call(ParsedOutput* out, bool at_end) {
  std::string_view rest = std::string_view(buf_).substr(pos_);
  auto need_more = [&]() {
    if (at_end) fail(out);
    return false;
  };
  switch (format_) {
    case ToolCallFormat::kHermes: {
      const size_t e = rest.find(kHermesClose);
      if (e == std::string_view::npos) return need_more();
      const ojson j = ojson::parse(trim(rest.substr(0, e)), nullptr, false);
      std::string name, args, id;
      if (!call_from_object(j, &name, &args, &id)) return fail(out), false;
      add_call(std::move(name), std::move(args), "", out);
      pos_ += e + kHermesClose.size();
      mode_ = Mode::kPlain;
      return true;
    }
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kMistral: {
      size_t i = 0;
      while (i < rest.size() && is_space(rest[i])) ++i;
      if (i == rest.size()) return need_more();
      if (rest[i] != '{' && rest[i] != '[') return fail(out), false;
      const size_t e = json_value_end(rest, i);
      if (e == std::string_view::npos) return need_more();
      const ojson j = ojson::parse(rest.substr(i, e - i), nullptr, false);
      struct Call {
        std::string name, args, id;
      };
      std::vector<Call> calls;
      const bool array = j.is_array() && format_ == ToolCallFormat::kMistral;
      for (size_t c = 0; c < (array ? j.size() : 1); ++c) {
        Call call;
        if (!call_from_object(array ? j[c] : j, &call.name, &call.args, &call.id)) return fail(out), false;
        calls.push_back(std::move(call));
      }
      if (calls.empty()) return fail(out), false;
      for (Call& c : calls) add_call(std::move(c.name), std::move(c.args), std::move(c.id), out);
      pos_ += e;
      mode_ = Mode::kPlain;
      return true;
    }
    case ToolCallFormat::kDeepSeek: {
      size_t i = 0;
      while (i < rest.size() && is_space(rest[i])) ++i;
      rest.remove_prefix(i);
      if (rest.substr(0, kDsCallsEnd.size()) == kDsCallsEnd) {
        if (!in_calls_block_ || call_start_ == block_start_) return fail(out), false;  // a block without calls
        pos_ += i + kDsCallsEnd.size();
        mode_ = Mode::kPlain;
        return true;
      }
      if (rest.substr(0, kDsCallBegin.size()) != kDsCallBegin) {
        const bool may_be_marker = kDsCallBegin.substr(0, rest.size()) == rest || kDsCallsEnd.substr(0, rest.size()) == rest;
        if (may_be_marker && !at_end) return false;
        if (n_parsed_ > 0 && in_calls_block_ && rest.empty()) {  // the calls block was never closed
          pos_ += i;
          mode_ = Mode::kPlain;
          return true;
        }
        return fail(out), false;
      }
      const size_t e = rest.find(kDsCallEnd);
      if (e == std::string_view::npos) return need_more();
      std::string_view body = rest.substr(kDsCallBegin.size(), e - kDsCallBegin.size());
      const size_t sep = body.find(kDsSep);
      if (sep == std::string_view::npos) return fail(out), false;
      body.remove_prefix(sep + kDsSep.size());
      const size_t nl = body.find('\n');
      const std::string_view name = trim(body.substr(0, nl));
      std::string_view args = nl == std::string_view::npos ? std::string_view() : trim(body.substr(nl + 1));
      if (args.substr(0, 3) == "```") {
        args.remove_prefix(std::min(args.size(), args.find('\n') == std::string_view::npos ? args.size() : args.find('\n') + 1));
        if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
        args = trim(args);
      }
      const ojson j = ojson::parse(args.empty() ? std::string_view("{}") : args, nullptr, false);
      if (name.empty() || !j.is_object() || !json_depth_within(j, kMaxToolJsonDepth)) return fail(out), false;
      add_call(std::string(name), j.dump(), "", out);
      pos_ += i + e + kDsCallEnd.size();
      call_start_ = pos_;
      if (!in_calls_block_) mode_ = Mode::kPlain;
      return true;
    }
    case ToolCallFormat::kNone: break;
  }
  return fail(out), false;
}

void ToolCallParser::add_call(std::string name, std::string arguments, std::string id, ParsedOutput* out) {
  const uint64_t n = static_cast<uint64_t>(n_parsed_++);
  if (n_calls_ >= max_calls_) return;
  if (id.empty()) {
    uint64_t h = splitmix64(id_seed_ ^ splitmix64(n));
    if (format_ == ToolCallFormat::kMistral) {
      // Mistral's template refuses ids that are not 9 letters and digits.
      static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
      for (int i = 0; i < 9; ++i, h /= 62) id += kAlnum[h % 62];
    } else {
      id = fmt::format("call_{:016x}", h);
    }
  }
  out->tool_calls.push_back(ToolCall{.id = std::move(id), .name = std::move(name), .arguments = std::move(arguments)});
  ++n_calls_;
}

void ToolCallParser::fail(ParsedOutput* out) {
  release_visible(call_start_, buf_.size(), out);
  buf_.clear();
  hidden_.clear();
  pos_ = 0;
  call_start_ = 0;
  mode_ = Mode::kFailed;
}

ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed) {
  ParsedOutput out;
  ToolCallParser p(format, id_seed);
  p.push(text, &out);
  p.finish(&out);
  return out;
}

bool is_tool_call_marker(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kLlama3: return text == kPythonTag;
    case ToolCallFormat::kHermes: return text == kHermesOpen || text == kHermesClose;
    case ToolCallFormat::kMistral: return text == kMistralOpen;
    case ToolCallFormat::kDeepSeek:
      return text == kDsCallsBegin || text == kDsCallsEnd || text == kDsCallBegin || text == kDsCallEnd || text == kDsSep;
    case ToolCallFormat::kNone: break;
  }
  return false;
}

}  // namespace sluice::server
