#include "server/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace sluice::server {

StatusOr<ChatTemplate> ChatTemplate::create(std::string source, std::string bos_token, std::string eos_token) {
  auto parsed = jinja::JinjaTemplate::parse(source);
  if (!parsed.ok()) return parsed.status();
  ChatTemplate t(std::move(source), std::move(parsed).value(), std::move(bos_token), std::move(eos_token));
  // A trial render finds unsupported methods and functions now, not on a request.
  auto trial = t.apply({ChatMessage{.role = "user", .content = "Hello"}}, true);
  if (!trial.ok() && trial.status().code() == StatusCode::kUnimplemented) return trial.status();
  t.string_arguments_ = !t.renders_probe_call(false) && t.renders_probe_call(true);
  return t;
}

bool ChatTemplate::renders_probe_call(bool as_string) const {
  const nlohmann::ordered_json args = {{"probe_arg", "probe_value"}};
  nlohmann::ordered_json call = {{"id", "abcdefghi"}, {"type", "function"},
                                 {"function", {{"name", "probe_fn"}, {"arguments", args}}}};
  if (as_string) call["function"]["arguments"] = python_json_dumps(args);
  const nlohmann::ordered_json msgs = {
      {{"role", "user"}, {"content", "Hello"}},
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", nlohmann::ordered_json::array({call})}}};
  auto out = apply_json(msgs, ChatOptions{.add_generation_prompt = false});
  return out.ok() && out->find("probe_value") != std::string::npos;
}

std::string python_json_dumps(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    std::string s = "{";
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it != j.begin()) s += ", ";
      s += nlohmann::ordered_json(it.key()).dump() + ": " + python_json_dumps(it.value());
    }
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + python_json_dumps(j[i]);
    return s + "]";
  }
  return j.dump();
}

StatusOr<ChatTemplate> ChatTemplate::from_file(const std::string& path, std::string bos_token, std::string eos_token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("chat template file {} cannot be opened", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto t = create(ss.str(), std::move(bos_token), std::move(eos_token));
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

StatusOr<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return apply(messages, ChatOptions{.add_generation_prompt = add_generation_prompt});
}

StatusOr<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (m.content_null) j["content"] = nullptr;
    if (!m.tool_calls.is_null()) {
      j["tool_calls"] = m.tool_calls;
      if (string_arguments_) {
        for (auto& c : j["tool_calls"]) {
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
          auto& a = c["function"]["arguments"];
          if (!a.is_string()) a = python_json_dumps(a);
        }
      }
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    msgs.push_back(std::move(j));
  }
  return apply_json(msgs, options);
}

StatusOr<std::string> ChatTemplate::apply_json(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  nlohmann::ordered_json context = {{"messages", messages}};
  if (!options.tools.is_null()) context["tools"] = options.tools;
  if (!options.documents.is_null()) context["documents"] = options.documents;
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = bos_;
  context["eos_token"] = eos_;
  return tmpl_.render(context, jinja::JinjaRenderOptions{.now_unix = options.now_unix});
}

std::vector<int32_t> tokenize_chat_prompt(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids = tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
  const int32_t bos = tokenizer.bos_id();
  if (tokenizer.add_bos() && bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace sluice::server
