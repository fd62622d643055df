// JinjaTemplate: renders the Jinja subset used by chat templates (jinja_parse.h
// lists the syntax). Semantics follow Python Jinja2 as Hugging Face configures it
// for chat templates (trim_blocks, lstrip_blocks, default Undefined).
//
// Globals available to every template: raise_exception(msg) (the render fails
// with kInvalidArgument carrying msg), range(), namespace(), strftime_now(fmt).
// Methods on strings (strip, split, startswith, ...) and dicts (items, get, ...)
// are the Python ones; an unknown method fails the render with kUnimplemented.
// A parsed template is immutable; render() may run on several threads at once.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/jinja_parse.h"
#include "sluice/status.h"

namespace sluice::server {

class JinjaTemplate {
 public:
  // Parses; see jinja_parse.h for the error codes.
  static StatusOr<JinjaTemplate> parse(std::string_view source);
  // Renders with the keys of `context` (a JSON object) as variables.
  StatusOr<std::string> render(const nlohmann::json& context) const;

 private:
  explicit JinjaTemplate(jinja::NodeList nodes) : nodes_(std::move(nodes)) {}
  jinja::NodeList nodes_;
};

}  // namespace sluice::server
