// How errors travel inside the Jinja files (jinja_lex, jinja_parse, jinja_*.cpp
// of the renderer): as a JinjaError exception, which JinjaTemplate::parse and
// JinjaTemplate::render turn into a Status. No exception leaves those two.
#pragma once

#include <string>

#include "sluice/status.h"

namespace sluice::jinja {

struct JinjaError {
  StatusCode code;
  std::string message;
};

// "chat template line N: what" as kInvalidArgument (syntax errors, type errors,
// raise_exception, misuse of undefined values).
[[noreturn]] inline void fail(int line, const std::string& what) {
  throw JinjaError{StatusCode::kInvalidArgument, "chat template line " + std::to_string(line) + ": " + what};
}

// A construct sluice does not implement, by name and line (kUnimplemented).
[[noreturn]] inline void unsupported(int line, const std::string& what) {
  throw JinjaError{StatusCode::kUnimplemented,
                   "chat template line " + std::to_string(line) + " uses " + what + ", which sluice does not support"};
}

// A limit of jinja_limits.h was hit (kResourceExhausted).
[[noreturn]] inline void over_limit(int line, const std::string& what) {
  throw JinjaError{StatusCode::kResourceExhausted, "chat template line " + std::to_string(line) + ": " + what};
}

}  // namespace sluice::jinja
