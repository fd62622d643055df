#include "server/openai_request.h"

#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace sluice::server {

nlohmann::json ApiError::body() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return {{"error", e}};
}

ApiError invalid_request(std::string param, std::string message, std::string code) {
  return ApiError{.http_status = 400,
                  .type = "invalid_request_error",
                  .code = std::move(code),
                  .param = std::move(param),
                  .message = std::move(message)};
}

ApiError api_error(int status, std::string type, std::string code, std::string message, std::string param) {
  return ApiError{.http_status = status,
                  .type = std::move(type),
                  .code = std::move(code),
                  .param = std::move(param),
                  .message = std::move(message)};
}

const char* endpoint_name(Endpoint e) { return e == Endpoint::kChat ? "chat.completions" : "completions"; }

namespace {

// Ordered, so tools and tool-call arguments reach the template in the order sent.
using ojson = nlohmann::ordered_json;

// Thrown by the field readers below, caught in parse_generation_request.
struct FieldError {
  ApiError error;
};

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw FieldError{invalid_request(param, message, code)};
}

const char* json_type(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return "integer";
    case ojson::value_t::number_float: return "number";
    case ojson::value_t::string: return "string";
    case ojson::value_t::array: return "array";
    case ojson::value_t::object: return "object";
    default: return "value";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const ojson& got) {
  bad(param, fmt::format("'{}' must be {}, got {}", param, expected, json_type(got)), "invalid_type");
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const ojson* field(const ojson& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool read_bool(const ojson& obj, const char* name, bool dflt) {
  const ojson* v = field(obj, name);
  if (!v) return dflt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<int64_t> read_int(const ojson& obj, const char* name, int64_t lo, int64_t hi) {
  const ojson* v = field(obj, name);
  if (!v) return std::nullopt;
  int64_t x;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(name, fmt::format("'{}' must be between {} and {}", name, lo, hi));
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e18) {
    x = static_cast<int64_t>(v->get<double>());  // 16.0 is accepted, as Python's int() would
  } else {
    wrong_type(name, "an integer", *v);
  }
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

float read_float(const ojson& obj, const char* name, float dflt, double lo, double hi) {
  const ojson* v = field(obj, name);
  if (!v) return dflt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return static_cast<float>(x);
}

std::string read_string(const ojson& obj, const char* name) {
  const ojson* v = field(obj, name);
  if (!v) return "";
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

std::vector<std::string> read_stop(const ojson& obj) {
  const ojson* v = field(obj, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > static_cast<size_t>(kMaxStopStrings))
      bad("stop", fmt::format("'stop' takes at most {} strings, got {}", kMaxStopStrings, v->size()));
    for (const auto& s : *v) {
      if (!s.is_string()) wrong_type("stop", "a string or an array of strings", s);
      out.push_back(s.get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *v);
  }
  for (const auto& s : out)
    if (s.empty()) bad("stop", "stop strings must not be empty");
  return out;
}

std::vector<int32_t> read_stop_token_ids(const ojson& obj) {
  const ojson* v = field(obj, "stop_token_ids");
  std::vector<int32_t> out;
  if (!v) return out;
  if (!v->is_array()) wrong_type("stop_token_ids", "an array of integer token ids", *v);
  if (v->size() > static_cast<size_t>(kMaxStopTokenIds))
    bad("stop_token_ids", fmt::format("'stop_token_ids' takes at most {} ids, got {}", kMaxStopTokenIds, v->size()));
  for (const auto& t : *v) {
    if (!t.is_number_integer()) wrong_type("stop_token_ids", "an array of integer token ids", t);
    if (t.is_number_unsigned() ? t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                               : t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad("stop_token_ids", fmt::format("'stop_token_ids' holds {}, which is not a token id", t.dump()));
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

std::string message_content(const ojson& m, size_t i, const std::string& role) {
  const std::string param = fmt::format("messages[{}].content", i);
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return "";
    bad(param, fmt::format("'{}' is required for role '{}'", param, role), "missing_required_parameter");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) wrong_type(param, "a string or an array of content parts", *it);
  std::string text;
  for (size_t p = 0; p < it->size(); ++p) {
    const ojson& part = (*it)[p];
    const std::string pp = fmt::format("{}[{}]", param, p);
    if (!part.is_object()) wrong_type(pp, "an object", part);
    const std::string type = read_string(part, "type");
    if (type != "text") bad(pp + ".type", fmt::format("content part type '{}' is not supported (only 'text')", type));
    const ojson* t = field(part, "text");
    if (!t || !t->is_string()) bad(pp + ".text", "a text content part needs a string 'text'", "invalid_type");
    text += t->get<std::string>();
  }
  return text;
}

// A function name as OpenAI accepts it: a-z, A-Z, 0-9, '_' and '-', 1 to 64 characters.
void check_function_name(const std::string& param, const ojson& name) {
  if (!name.is_string()) wrong_type(param, "a string", name);
  const std::string& s = name.get_ref<const std::string&>();
  bool ok = !s.empty() && s.size() <= 64;
  for (char c : s) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  if (!ok) bad(param, fmt::format("'{}' must be 1 to 64 letters, digits, '_' or '-', got '{}'", param, s));
}

// The "function" object of a tool or a tool call at `param`, and its "name"
// (present, of any type): both required.
std::pair<const ojson*, const ojson*> read_function(const ojson& parent, const std::string& param) {
  const ojson* fn = field(parent, "function");
  if (!fn) bad(param + ".function", fmt::format("'{}.function' is required", param), "missing_required_parameter");
  if (!fn->is_object()) wrong_type(param + ".function", "an object", *fn);
  const ojson* name = field(*fn, "name");
  if (!name) bad(param + ".function.name", fmt::format("'{}.function.name' is required", param), "missing_required_parameter");
  return {fn, name};
}

// An assistant message's tool_calls in HF's form: arguments sent as a JSON
// string become the object it holds (a string that is not JSON stays a string).
ojson read_message_tool_calls(const ojson& calls, size_t i) {
  const std::string param = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) wrong_type(param, "an array", calls);
  ojson out = ojson::array();
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::string cp = fmt::format("{}[{}]", param, c);
    const ojson& call = calls[c];
    if (!call.is_object()) wrong_type(cp, "an object", call);
    if (const std::string type = read_string(call, "type"); !type.empty() && type != "function")
      bad(cp + ".type", fmt::format("tool call type '{}' is not supported (only 'function')", type));
    const auto [fn, name] = read_function(call, cp);
    if (!name->is_string()) wrong_type(cp + ".function.name", "a string", *name);
    ojson args = ojson::object();
    if (const ojson* a = field(*fn, "arguments")) {
      if (a->is_string()) {
        ojson parsed = ojson::parse(a->get<std::string>(), nullptr, /*allow_exceptions=*/false);
        args = parsed.is_discarded() ? *a : std::move(parsed);
      } else if (a->is_object()) {
        args = *a;
      } else {
        wrong_type(cp + ".function.arguments", "a JSON string or an object", *a);
      }
    }
    if (!json_depth_within(args, kMaxToolJsonDepth))
      bad(cp + ".function.arguments", fmt::format("arguments nest deeper than {} levels", kMaxToolJsonDepth));
    ojson entry = ojson::object();
    if (const ojson* id = field(call, "id")) {
      if (!id->is_string()) wrong_type(cp + ".id", "a string", *id);
      entry["id"] = *id;
    }
    entry["type"] = "function";
    entry["function"] = {{"name", *name}, {"arguments", std::move(args)}};
    out.push_back(std::move(entry));
  }
  return out;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
ojson read_tools(const ojson& body) {
  const ojson* t = field(body, "tools");
  if (!t) return ojson();
  if (!t->is_array()) wrong_type("tools", "an array", *t);
  if (t->empty()) return ojson();
  if (t->size() > static_cast<size_t>(kMaxTools)) bad("tools", fmt::format("'tools' takes at most {} tools, got {}", kMaxTools, t->size()));
  std::vector<std::string> names;
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string p = fmt::format("tools[{}]", i);
    const ojson& tool = (*t)[i];
    if (!tool.is_object()) wrong_type(p, "an object", tool);
    const ojson* type = field(tool, "type");
    if (!type) bad(p + ".type", fmt::format("'{}.type' is required", p), "missing_required_parameter");
    if (!type->is_string() || type->get<std::string>() != "function")
      bad(p + ".type", fmt::format("'{}.type' must be 'function'", p));
    const auto [fn, name] = read_function(tool, p);
    check_function_name(p + ".function.name", *name);
    if (std::find(names.begin(), names.end(), name->get<std::string>()) != names.end())
      bad(p + ".function.name", fmt::format("two tools are named '{}'", name->get<std::string>()));
    names.push_back(name->get<std::string>());
    if (const ojson* d = field(*fn, "description"); d && !d->is_string()) wrong_type(p + ".function.description", "a string", *d);
    if (const ojson* ps = field(*fn, "parameters"); ps && !ps->is_object())
      wrong_type(p + ".function.parameters", "an object (a JSON Schema)", *ps);
    if (const ojson* s = field(*fn, "strict"); s && !s->is_boolean()) wrong_type(p + ".function.strict", "a boolean", *s);
    if (!json_depth_within(tool, kMaxToolJsonDepth))
      bad(p, fmt::format("'{}' nests deeper than {} levels", p, kMaxToolJsonDepth));
  }
  return *t;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
void read_tool_choice(const ojson& body, GenerationRequest* r) {
  const ojson* c = field(body, "tool_choice");
  if (!c) return;
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") r->tool_choice = ToolChoice::kNone;
    else if (s == "auto") r->tool_choice = ToolChoice::kAuto;
    else if (s == "required") r->tool_choice = ToolChoice::kRequired;
    else bad("tool_choice", fmt::format("'tool_choice' must be 'none', 'auto', 'required' or a function object, got '{}'", s));
  } else if (c->is_object()) {
    if (read_string(*c, "type") != "function") bad("tool_choice.type", "'tool_choice.type' must be 'function'");
    const ojson* fn = field(*c, "function");
    if (!fn || !fn->is_object())
      bad("tool_choice.function", "'tool_choice.function' must be an object with a 'name'", "missing_required_parameter");
    const ojson* name = field(*fn, "name");
    if (!name) bad("tool_choice.function.name", "'tool_choice.function.name' is required", "missing_required_parameter");
    check_function_name("tool_choice.function.name", *name);
    r->tool_choice = ToolChoice::kNamed;
    r->tool_choice_name = name->get<std::string>();
  } else {
    wrong_type("tool_choice", "a string or an object", *c);
  }
  const bool named_or_required = r->tool_choice == ToolChoice::kNamed || r->tool_choice == ToolChoice::kRequired;
  if (named_or_required && r->tools.is_null())
    bad("tool_choice", "'tool_choice' 'required' or a named function needs 'tools'");
  if (r->tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const auto& t : r->tools) found = found || t["function"]["name"] == r->tool_choice_name;
    if (!found) bad("tool_choice.function.name", fmt::format("'tool_choice' names '{}', which is not in 'tools'", r->tool_choice_name));
  }
}

void parse_messages(const ojson& body, GenerationRequest* r) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) bad("messages", "'messages' is required", "missing_required_parameter");
  if (!it->is_array()) wrong_type("messages", "an array", *it);
  if (it->empty()) bad("messages", "'messages' must contain at least one message");
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& m = (*it)[i];
    if (!m.is_object()) wrong_type(fmt::format("messages[{}]", i), "an object", m);
    const ojson* role = field(m, "role");
    const std::string rp = fmt::format("messages[{}].role", i);
    if (!role) bad(rp, fmt::format("'{}' is required", rp), "missing_required_parameter");
    if (!role->is_string()) wrong_type(rp, "a string", *role);
    std::string r_name = role->get<std::string>();
    if (r_name == "developer") r_name = "system";
    if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "tool")
      bad(rp, fmt::format("unknown role '{}' (expected system, developer, user, assistant or tool)", r_name));
    ChatMessage msg{.role = r_name};
    if (const ojson* calls = field(m, "tool_calls"); calls && !(calls->is_array() && calls->empty())) {
      if (r_name != "assistant") bad(fmt::format("messages[{}].tool_calls", i), "only assistant messages carry 'tool_calls'");
      msg.tool_calls = read_message_tool_calls(*calls, i);
    }
    msg.content = message_content(m, i, r_name);
    msg.content_null = !msg.tool_calls.is_null() && field(m, "content") == nullptr;
    if (r_name == "tool") {
      for (auto [key, dst] : {std::pair{"tool_call_id", &msg.tool_call_id}, std::pair{"name", &msg.name}}) {
        const ojson* v = field(m, key);
        if (!v) continue;
        if (!v->is_string()) wrong_type(fmt::format("messages[{}].{}", i, key), "a string", *v);
        *dst = v->get<std::string>();
      }
    }
    r->messages.push_back(std::move(msg));
  }
}

void parse_prompt(const ojson& body, GenerationRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad("prompt", "'prompt' is required", "missing_required_parameter");
  const ojson& p = *it;
  if (p.is_string()) {
    r->prompt = p.get<std::string>();
    return;
  }
  if (!p.is_array()) wrong_type("prompt", "a string, an array of one string, or an array of token ids", p);
  if (p.empty()) bad("prompt", "'prompt' must not be empty");
  if (p[0].is_string() || p[0].is_array()) {
    if (p.size() != 1) bad("prompt", "only one prompt per request is supported; send one request per prompt");
    if (p[0].is_string()) {
      r->prompt = p[0].get<std::string>();
      return;
    }
    parse_prompt(ojson{{"prompt", p[0]}}, r);
    return;
  }
  for (const auto& t : p) {
    if (!t.is_number_integer()) wrong_type("prompt", "a string or an array of integer token ids", t);
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad("prompt", fmt::format("token id {} is out of range", id));
    r->prompt_ids.push_back(static_cast<int32_t>(id));
  }
  r->prompt_is_ids = true;
}

void refuse_unsupported(const ojson& body, int32_t n) {
  if (read_bool(body, "echo", false)) bad("echo", "'echo' is not supported");
  if (!read_string(body, "suffix").empty()) bad("suffix", "'suffix' is not supported");
  if (auto best_of = read_int(body, "best_of", 1, kMaxChoices); best_of && *best_of != 1 && *best_of != n)
    bad("best_of", "'best_of' other than n is not supported");
  if (const ojson* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object", *lb);
    if (!lb->empty()) bad("logit_bias", "'logit_bias' is not supported");
  }
  for (const char* f : {"functions", "function_call"}) {
    if (const ojson* t = field(body, f); t && !(t->is_array() && t->empty()))
      bad(f, fmt::format("'{}' (deprecated by OpenAI) is not supported; send 'tools' and 'tool_choice'", f));
  }
  if (const ojson* rf = field(body, "response_format")) {
    if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
    if (read_string(*rf, "type") != "text" && !read_string(*rf, "type").empty())
      bad("response_format", "only response_format {\"type\": \"text\"} is supported");
  }
}

}  // namespace

std::variant<GenerationRequest, ApiError> parse_generation_request(Endpoint endpoint, std::string_view body_text) {
  ojson body = ojson::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return ApiError{.http_status = 400,
                    .type = "invalid_request_error",
                    .code = "invalid_json",
                    .message = "the request body is not valid JSON"};
  }
  if (!body.is_object()) return invalid_request("", "the request body must be a JSON object", "invalid_type");
  GenerationRequest r;
  r.endpoint = endpoint;
  try {
    r.model = read_string(body, "model");
    if (endpoint == Endpoint::kChat) parse_messages(body, &r);
    else parse_prompt(body, &r);
    r.stream = read_bool(body, "stream", false);
    if (const ojson* so = field(body, "stream_options")) {
      if (!so->is_object()) wrong_type("stream_options", "an object", *so);
      if (!r.stream) bad("stream_options", "'stream_options' is only allowed with stream: true");
      r.include_usage = read_bool(*so, "include_usage", false);
    }
    r.n = static_cast<int32_t>(read_int(body, "n", 1, kMaxChoices).value_or(1));
    constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
    r.max_tokens = read_int(body, "max_tokens", 1, kIntMax);
    if (endpoint == Endpoint::kChat) {
      if (auto mct = read_int(body, "max_completion_tokens", 1, kIntMax)) r.max_tokens = mct;
    }
    r.temperature = read_float(body, "temperature", 1.0f, 0.0, 2.0);
    r.top_p = read_float(body, "top_p", 1.0f, 0.0, 1.0);
    if (r.top_p <= 0.0f) bad("top_p", "'top_p' must be greater than 0");
    r.presence_penalty = read_float(body, "presence_penalty", 0.0f, -2.0, 2.0);
    r.frequency_penalty = read_float(body, "frequency_penalty", 0.0f, -2.0, 2.0);
    r.seed = read_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    r.stop = read_stop(body);
    if (endpoint == Endpoint::kChat) {
      const bool lp = read_bool(body, "logprobs", false);
      auto top = read_int(body, "top_logprobs", 0, kMaxChatTopLogprobs);
      if (top && !lp) bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
      if (lp) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
    } else {
      if (const ojson* lp = field(body, "logprobs"); lp && lp->is_boolean()) wrong_type("logprobs", "an integer", *lp);
      if (auto lp = read_int(body, "logprobs", 0, kMaxCompletionLogprobs)) r.top_logprobs = static_cast<int32_t>(*lp);
    }
    if (endpoint == Endpoint::kChat) {
      r.tools = read_tools(body);
      read_tool_choice(body, &r);
      r.parallel_tool_calls = read_bool(body, "parallel_tool_calls", true);
    } else {
      for (const char* f : {"tools", "tool_choice", "parallel_tool_calls"})
        if (field(body, f)) bad(f, fmt::format("'{}' is only accepted by /v1/chat/completions", f));
    }
    r.stop_token_ids = read_stop_token_ids(body);
    r.ignore_eos = read_bool(body, "ignore_eos", false);
    r.return_token_ids = read_bool(body, "return_token_ids", false);
    refuse_unsupported(body, r.n);
    (void)read_string(body, "user");
  } catch (const FieldError& e) {
    return e.error;
  } catch (const ojson::exception& e) {
    return invalid_request("", std::string("malformed request: ") + e.what(), "invalid_type");
  }
  return r;
}

}  // namespace sluice::server
