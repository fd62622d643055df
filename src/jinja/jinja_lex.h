// The first stage of the Jinja parser: splits template text into literal text,
// {{ expression }} and {% statement %} segments, applying whitespace control the
// way Hugging Face configures jinja2 for chat templates ('-' strips all
// whitespace on its side; trim_blocks drops the newline after a block tag or
// comment; lstrip_blocks drops spaces and tabs between a line start and a block
// tag or comment; '+' turns lstrip off for one tag), and tokenizes each tag.
// Errors are thrown as JinjaError (jinja_error.h); parse_template catches them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp };
  Kind kind = Kind::kName;
  std::string text;  // name, operator, digits, or the decoded string literal
  int line = 1;
};

// One piece of the template: literal text, an {{ expression }} or a {% statement %}.
struct Segment {
  enum class Kind { kText, kExpr, kStmt };
  Kind kind = Kind::kText;
  std::string text;           // kText
  std::vector<Token> tokens;  // kExpr, kStmt
  int line = 1;
};

// The segments of `source`, whitespace control applied; with
// keep_trailing_newline=False, one newline at the very end is dropped.
std::vector<Segment> split_segments(std::string_view source);

}  // namespace sluice::jinja
