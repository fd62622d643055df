#include "server/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace sluice::server {

StatusOr<ChatTemplate> ChatTemplate::create(std::string source, std::string bos_token, std::string eos_token) {
  auto parsed = JinjaTemplate::parse(source);
  if (!parsed.ok()) return parsed.status();
  ChatTemplate t(std::move(source), std::move(parsed).value(), std::move(bos_token), std::move(eos_token));
  // A trial render finds unsupported methods and functions now, not on a request.
  auto trial = t.apply({ChatMessage{.role = "user", .content = "Hello"}}, true);
  if (!trial.ok() && trial.status().code() == StatusCode::kUnimplemented) return trial.status();
  return t;
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
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
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
  return tmpl_.render(context, JinjaRenderOptions{.now_unix = options.now_unix});
}

std::vector<int32_t> tokenize_chat_prompt(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids = tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
  const int32_t bos = tokenizer.bos_id();
  if (tokenizer.add_bos() && bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  return ids;
}

}  // namespace sluice::server
