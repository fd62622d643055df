// Jinja chat templates: parse the input as a template and render an accepted one
// with a fixed conversation (system, user, assistant, user; a tool list; the
// generation prompt), the variables chat templates read.
#include <string_view>

#include <nlohmann/json.hpp>

#include "harnesses.h"
#include "jinja/jinja.h"

namespace sluice::fuzz {
namespace {

const nlohmann::json& conversation() {
  static const nlohmann::json* c = new nlohmann::json(nlohmann::json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Hi there"},
      {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": "What is 2+2?"}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
               "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}],
    "bos_token": "<s>",
    "eos_token": "</s>",
    "add_generation_prompt": true
  })"));
  return *c;
}

}  // namespace

void fuzz_jinja(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  StatusOr<jinja::JinjaTemplate> tmpl = jinja::JinjaTemplate::parse(source);
  if (!tmpl.ok()) {
    FUZZ_CHECK(!tmpl.status().message().empty());
    return;
  }
  // A second of rendering, well under libFuzzer's -timeout, even when starved.
  StatusOr<std::string> out = tmpl->render(conversation(), jinja::JinjaRenderOptions{.max_render_ms = 1000});
  if (!out.ok()) FUZZ_CHECK(!out.status().message().empty());
}

}  // namespace sluice::fuzz
