// The syntax tree of the Jinja subset that chat templates use, and its parser.
//
// Statements: {% if/elif/else %}, {% for a[, b] in expr [if cond] %} ... {% else %}
// ... {% endfor %} with {% break %} and {% continue %}, {% set x = expr %},
// {% set ns.attr = expr %}, {% set a, b = expr %}, {% set x [| filters] %} ...
// {% endset %}, {% macro name(a, b=default) %}, {% call [(params)] macro(...) %}
// (the body is the macro's caller()), {% filter name(args) %} ... {% endfilter %},
// {% generation %} (as Hugging Face's extension: renders its body) and
// {# comments #}; whitespace control as jinja_lex.h describes.
// Expressions: literals, lists, dicts, tuples (lists that print as tuples), attribute, index and
// slice access, calls with keyword arguments, filters, `is [not]` tests,
// arithmetic, `~`, comparisons, `in`/`not in`, and/or/not, `a if c else b`.
//
// Anything else (include, import, extends, block, recursive loops, unknown filters
// or tests, ...) is refused at parse time by name and line with kUnimplemented,
// so a model whose template needs more fails at startup. Syntax errors are
// kInvalidArgument; nesting deeper than kMaxParseDepth and sources larger than
// kMaxTemplateBytes are kResourceExhausted (jinja_limits.h).
// The tree is immutable once built and may be rendered from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/jinja_value.h"
#include "sluice/status.h"

namespace sluice::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { kLiteral, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCond, kList, kDict };
  Kind kind = Kind::kLiteral;
  int line = 1;
  int depth = 1;              // height of this subtree; capped by kMaxParseDepth
  JinjaValue literal;         // kLiteral
  std::string name;           // kName, kAttr (attribute), kFilter, kTest, kUnary/kBinary (operator), kList ("tuple" or "")
  bool negated = false;       // kTest: `is not`
  // Operands, by kind:
  //   kAttr [obj]  kIndex [obj, key]  kSlice [obj, start, stop, step] (null when absent)
  //   kCall [callee, positional...]  kFilter/kTest [subject, args...] (a filter of a
  //   {% filter %} or {% set %} block has a null subject: the block's text)
  //   kUnary [operand]  kBinary [lhs, rhs]  kCond [then, condition, else (may be null)]
  //   kList [items...]  kDict [key0, value0, key1, value1, ...]
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter, kTest
};

struct Node;
using NodePtr = std::shared_ptr<const Node>;
using NodeList = std::vector<NodePtr>;

// A parameter of a macro or of a {% call %} block's caller; `dflt` may be null.
struct Param {
  std::string name;
  ExprPtr dflt;
};

struct Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue };
  Kind kind = Kind::kText;
  int line = 1;
  std::string text;                                    // kText; kMacro: the macro's name
  ExprPtr expr;                                        // kOutput, kSet (value), kFor (iterable), kCallBlock (the call)
  ExprPtr condition;                                   // kFor: the loop filter (`for x in xs if cond`), or null
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // kIf: (condition, body) for if and each elif
  NodeList body;                                       // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock
  NodeList else_body;                                  // kIf, kFor
  // kFor: loop variables; kSet/kSetBlock: [name], [namespace, attribute] (attribute
  // set, when `attribute` is true) or several names (tuple unpacking).
  std::vector<std::string> targets;
  bool attribute = false;
  std::vector<Param> params;                           // kMacro, kCallBlock (the caller's)
  std::vector<ExprPtr> filters;                        // kSetBlock, kFilterBlock (kFilter, null subject)
};

// Parses template text (errors as the header comment says, each naming the line).
StatusOr<NodeList> parse_template(std::string_view source);

// Filters and tests the renderer implements (the parser refuses others);
// defined beside their implementations in jinja_filters.cpp and jinja_tests.cpp.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace sluice::jinja
