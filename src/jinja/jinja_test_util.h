// Helpers for the Jinja tests: render a template and get its text, or the
// error that stopped it, as one string to compare.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "jinja/jinja.h"

namespace sluice::testing {

// The rendering of `src` with `ctx`'s keys as variables, or "PARSE ERROR: ..."
// / "RENDER ERROR: ..." with the status.
inline std::string render(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  auto t = jinja::JinjaTemplate::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().to_string();
  auto out = t->render(ctx);
  if (!out.ok()) return "RENDER ERROR: " + out.status().to_string();
  return *out;
}

}  // namespace sluice::testing
