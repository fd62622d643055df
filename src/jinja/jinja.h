// JinjaTemplate: renders the Jinja subset used by chat templates (jinja_parse.h
// lists the syntax). Semantics follow Python jinja2 as Hugging Face configures it
// for chat templates: ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls, default Undefined, HF's tojson.
//
// Globals available to every template: raise_exception(msg) (the render fails
// with kInvalidArgument carrying msg), range(), namespace(), dict(),
// strftime_now(fmt). Filters are in jinja_filters.cpp, tests (`is ...`)
// in jinja_tests.cpp, methods of strings, dicts and lists in jinja_methods.cpp;
// all are Python's. Using an undefined value where jinja2 raises (attribute,
// arithmetic, call) fails with jinja2's wording ("'x' is undefined").
//
// Rendering is bounded by jinja_limits.h (output bytes, loop iterations, macro
// call depth, wall-clock time); hitting a limit is kResourceExhausted naming it.
// A parsed template is immutable; render() may run on several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "jinja/jinja_limits.h"
#include "jinja/jinja_parse.h"
#include "sluice/status.h"

namespace sluice::jinja {

struct JinjaRenderOptions {
  // The clock strftime_now() reads, as Unix seconds formatted in UTC; unset:
  // the real clock in local time (what Python's datetime.now() gives).
  std::optional<int64_t> now_unix;
  // Wall-clock limit of the render (jinja_limits.h); past it, kResourceExhausted.
  int64_t max_render_ms = jinja::kMaxRenderMillis;
};

class JinjaTemplate {
 public:
  // Parses; see jinja_parse.h for the error codes.
  static StatusOr<JinjaTemplate> parse(std::string_view source);
  // Renders with the keys of `context` (a JSON object; key order is kept, as
  // Python's dicts keep it) as variables.
  StatusOr<std::string> render(const nlohmann::ordered_json& context, const JinjaRenderOptions& options = {}) const;

 private:
  explicit JinjaTemplate(jinja::NodeList nodes) : nodes_(std::move(nodes)) {}
  jinja::NodeList nodes_;
};

}  // namespace sluice::jinja
