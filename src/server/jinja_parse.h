// The syntax tree of the Jinja subset that chat templates use, and its parser.
//
// Supported: {{ expr }}, {% if/elif/else/endif %}, {% for x[, y] in expr %}
// ... {% else %} ... {% endfor %}, {% set name = expr %}, {% set ns.attr = expr %},
// {# comments #}, whitespace control ({%- -%}) with HF's trim_blocks and
// lstrip_blocks; expressions with literals, lists, dicts, attribute/index/slice
// access, calls, filters, `is` tests, arithmetic, `~`, comparisons, `in`,
// and/or/not and `a if c else b`. Anything else (macro, call, block, include,
// break, unknown filters or tests, ...) is refused at parse time by name and line,
// with kUnimplemented, so a model whose template needs more fails at startup.
// The tree is immutable once built and may be rendered from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/jinja_value.h"
#include "sluice/status.h"

namespace sluice::server::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { kLiteral, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond, kList, kDict };
  Kind kind = Kind::kLiteral;
  int line = 1;
  JinjaValue literal;         // kLiteral
  std::string name;           // kName, kAttr (attribute), kFilter, kTest, kUnary/kBinary (operator)
  bool negated = false;       // kTest: `is not`
  // Operands, by kind:
  //   kAttr [obj]  kIndex [obj, key]  kSlice [obj, start, stop, step] (null when absent)
  //   kCall [callee, positional...]  kFilter/kTest [subject, args...]
  //   kUnary [operand]  kBinary [lhs, rhs]  kCond [then, condition, else (may be null)]
  //   kList [items...]  kDict [key0, value0, key1, value1, ...]
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kSet (value), kFor (iterable)
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // kIf: (condition, body) for if and each elif
  NodeList body;                                   // kFor
  NodeList else_body;                              // kIf, kFor
  std::vector<std::string> targets;                // kFor: loop variables; kSet: [name] or [namespace, attribute]
};

// Parses template text. Syntax errors are kInvalidArgument, unsupported
// constructs kUnimplemented; both name the line.
StatusOr<NodeList> parse_template(std::string_view source);

// Filters, tests and global functions the renderer implements (the parser refuses others).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace sluice::server::jinja
