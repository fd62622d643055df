#include "jinja/jinja_parse.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <set>

#include "jinja/jinja_error.h"
#include "jinja/jinja_lex.h"
#include "jinja/jinja_limits.h"

namespace sluice::jinja {
namespace {

JinjaValue int_literal(const Token& t) {  // Python's ints are unbounded, ours 64-bit: past int64 is an error
  int64_t v = 0;
  if (std::from_chars(t.text.data(), t.text.data() + t.text.size(), v).ec != std::errc())
    fail(t.line, "integer literal " + t.text + " does not fit in 64 bits");
  return JinjaValue::integer(v);
}

[[noreturn]] void too_deep(int line) {
  over_limit(line, "nesting deeper than " + std::to_string(kMaxParseDepth) + " levels (limit kMaxParseDepth)");
}

// Parses the expression tokens of one tag.
class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t start, int tag_line)
      : toks_(tokens), i_(start), tag_line_(tag_line) {}

  size_t pos() const { return i_; }
  bool at_end() const { return i_ >= toks_.size(); }
  int line() const { return at_end() ? (toks_.empty() ? tag_line_ : toks_.back().line) : toks_[i_].line; }
  bool peek_op(const char* op, size_t ahead = 0) const {
    return i_ + ahead < toks_.size() && toks_[i_ + ahead].kind == Token::Kind::kOp && toks_[i_ + ahead].text == op;
  }
  bool peek_name(const char* n, size_t ahead = 0) const {
    return i_ + ahead < toks_.size() && toks_[i_ + ahead].kind == Token::Kind::kName && toks_[i_ + ahead].text == n;
  }
  bool accept_op(const char* op) {
    if (!peek_op(op)) return false;
    ++i_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!peek_name(n)) return false;
    ++i_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(line(), std::string("expected '") + op + "'" + found());
  }
  std::string expect_name() {
    if (at_end() || toks_[i_].kind != Token::Kind::kName) fail(line(), "expected a name" + found());
    return toks_[i_++].text;
  }
  std::string found() const { return at_end() ? " at the end of the tag" : " before '" + toks_[i_].text + "'"; }
  void expect_end(const char* where) {
    if (!at_end()) fail(line(), "unexpected '" + toks_[i_].text + "' in " + where);
  }

  // expr [if cond [else expr]]
  ExprPtr parse_expr() {
    ExprPtr e = parse_or();
    if (accept_name("if")) {
      ExprPtr cond = parse_or();
      ExprPtr other = accept_name("else") ? parse_expr() : nullptr;
      return make(Expr::Kind::kCond, "", {e, cond, other});
    }
    return e;
  }
  // An expression without a trailing `if` (for iterables, whose `if` is the loop filter).
  ExprPtr parse_no_cond() { return parse_or(); }
  // `a, b` (a tuple without parentheses) or one expression.
  ExprPtr parse_tuple() {
    ExprPtr e = parse_expr();
    if (!peek_op(",")) return e;
    std::vector<ExprPtr> items = {e};
    while (accept_op(",")) {
      if (at_end()) break;
      items.push_back(parse_expr());
    }
    return make(Expr::Kind::kList, "tuple", std::move(items));
  }

  // Call arguments after '(' up to and including ')'.
  void parse_call_args(std::vector<ExprPtr>* positional, std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
    bool any = false;
    while (!accept_op(")")) {
      if (any) expect_op(",");
      any = true;
      if (accept_op(")")) return;  // trailing comma
      if (peek_op("*") || peek_op("**")) unsupported(line(), "*args or **kwargs in a call");
      if (!at_end() && toks_[i_].kind == Token::Kind::kName && peek_op("=", 1)) {
        std::string name = toks_[i_].text;
        i_ += 2;
        kwargs->emplace_back(name, parse_expr());
      } else {
        if (!kwargs->empty()) fail(line(), "a positional argument after a keyword argument");
        positional->push_back(parse_expr());
      }
    }
  }

  // Comma-separated items up to `close` (consumed; a trailing comma is
  // allowed), each parsed by `item`.
  template <class Item>
  void parse_items(const char* close, Item item) {
    for (bool first = true; !accept_op(close); first = false) {
      if (!first) expect_op(",");
      if (accept_op(close)) break;
      item();
    }
  }

  // A filter or a test at line `at`: `name` applied to `subject`, its first operand.
  static std::shared_ptr<Expr> applied(Expr::Kind kind, int at, std::string name, ExprPtr subject) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = at;
    e->name = std::move(name);
    e->operands.push_back(std::move(subject));
    return e;
  }

  // `|name(args)` with the subject given (null for a block filter); '|' consumed.
  ExprPtr parse_filter(ExprPtr subject) {
    const int at = line();
    std::string name = expect_name();
    if (!is_known_filter(name)) unsupported(at, "the filter '" + name + "'");
    auto f = applied(Expr::Kind::kFilter, at, std::move(name), std::move(subject));
    if (accept_op("(")) parse_call_args(&f->operands, &f->kwargs);
    return finish(f);
  }

  // Parameters of a macro or caller: (a, b=default, ...); '(' consumed.
  std::vector<Param> parse_params() {
    std::vector<Param> params;
    while (!accept_op(")")) {
      if (!params.empty()) expect_op(",");
      if (accept_op(")")) break;
      Param p{.name = expect_name(), .dflt = nullptr};
      if (accept_op("=")) p.dflt = parse_expr();
      params.push_back(std::move(p));
    }
    return params;
  }

 private:
  // Sets depth from the operands and enforces kMaxParseDepth: evaluation recurses
  // once per level, so a left-deep chain (1+1+1+...) is as deep as nested parentheses.
  ExprPtr finish(std::shared_ptr<Expr> e) {
    int d = 0;
    for (const auto& o : e->operands)
      if (o) d = std::max(d, o->depth);
    for (const auto& [k, v] : e->kwargs) d = std::max(d, v->depth);
    e->depth = d + 1;
    if (e->depth > kMaxParseDepth) too_deep(e->line);
    return e;
  }
  ExprPtr make(Expr::Kind kind, std::string name, std::vector<ExprPtr> operands) {
    auto e = std::make_shared<Expr>();
    e->kind = kind, e->line = line(), e->name = std::move(name), e->operands = std::move(operands);
    return finish(e);
  }
  struct DepthGuard {  // guards the recursion of nested parentheses, lists and unary operators
    explicit DepthGuard(ExprParser* p) : p_(p) { if (++p_->depth_ > kMaxParseDepth) too_deep(p_->line()); }
    ~DepthGuard() { --p_->depth_; }
    ExprParser* p_;
  };

  // A left-associative level: operands parsed by `next`, joined by the first
  // of `ops` that follows (keywords when `names`, else operators).
  ExprPtr parse_left(ExprPtr (ExprParser::*next)(), std::initializer_list<const char*> ops, bool names) {
    ExprPtr l = (this->*next)();
    while (true) {
      const char* op = nullptr;
      for (const char* c : ops)
        if (!op && (names ? accept_name(c) : accept_op(c))) op = c;
      if (!op) return l;
      l = make(Expr::Kind::kBinary, op, {l, (this->*next)()});
    }
  }

  ExprPtr parse_or() { return parse_left(&ExprParser::parse_and, {"or"}, true); }
  ExprPtr parse_and() { return parse_left(&ExprParser::parse_not, {"and"}, true); }
  ExprPtr parse_not() {
    if (accept_name("not")) {
      DepthGuard g(this);
      return make(Expr::Kind::kUnary, "not", {parse_not()});
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      std::string op;
      for (const char* c : {"==", "!=", "<=", ">=", "<", ">"})
        if (op.empty() && accept_op(c)) op = c;
      if (op.empty()) {
        if (accept_name("in")) {
          op = "in";
        } else if (peek_name("not") && peek_name("in", 1)) {
          i_ += 2;
          op = "not in";
        } else {
          return l;
        }
      }
      l = make(Expr::Kind::kBinary, op, {l, parse_math1()});
    }
  }
  ExprPtr parse_math1() { return parse_left(&ExprParser::parse_concat, {"+", "-"}, false); }
  ExprPtr parse_concat() { return parse_left(&ExprParser::parse_math2, {"~"}, false); }
  ExprPtr parse_math2() { return parse_left(&ExprParser::parse_pow, {"//", "*", "/", "%"}, false); }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (accept_op("**")) l = make(Expr::Kind::kBinary, "**", {l, parse_unary(true)});
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr e;
    if (accept_op("-")) e = make(Expr::Kind::kUnary, "-", {parse_unary(false)});
    else if (accept_op("+")) e = parse_unary(false);
    else e = parse_postfix(parse_primary());
    return with_filter ? parse_filters(e) : e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        if (!at_end() && toks_[i_].kind == Token::Kind::kInt) {  // a.0 == a[0]
          auto idx = std::make_shared<Expr>();
          idx->line = line();
          idx->literal = int_literal(toks_[i_++]);
          e = make(Expr::Kind::kIndex, "", {e, idx});
        } else {
          e = make(Expr::Kind::kAttr, expect_name(), {e});
        }
      } else if (accept_op("[")) {
        ExprPtr parts[3] = {nullptr, nullptr, nullptr};
        int part = 0;
        bool slice = false;
        while (!accept_op("]")) {
          if (accept_op(":")) {
            slice = true;
            if (++part > 2) fail(line(), "too many ':' in a slice");
            continue;
          }
          if (parts[part]) fail(line(), "expected ']'" + found());
          parts[part] = parse_expr();
        }
        if (slice) e = make(Expr::Kind::kSlice, "", {e, parts[0], parts[1], parts[2]});
        else if (parts[0]) e = make(Expr::Kind::kIndex, "", {e, parts[0]});
        else fail(line(), "empty subscript");
      } else if (accept_op("(")) {
        auto call = std::make_shared<Expr>();
        call->kind = Expr::Kind::kCall;
        call->line = line();
        call->operands.push_back(e);
        parse_call_args(&call->operands, &call->kwargs);
        e = finish(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        e = parse_postfix(parse_filter(e));
      } else if (accept_name("is")) {
        const int at = line();
        const bool negated = accept_name("not");
        std::string name = expect_name();
        if (!is_known_test(name)) unsupported(at, "the test '" + name + "'");
        auto t = applied(Expr::Kind::kTest, at, std::move(name), e);
        t->negated = negated;
        if (accept_op("(")) {
          parse_call_args(&t->operands, &t->kwargs);
        } else if (takes_bare_argument()) {
          t->operands.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas x`
        }
        e = finish(t);
      } else {
        return e;
      }
    }
  }
  // After a test name: is the next token its one argument (jinja2's rule)?
  bool takes_bare_argument() const {
    if (at_end()) return false;
    const Token& t = toks_[i_];
    if (t.kind == Token::Kind::kOp) return t.text == "[" || t.text == "{";
    if (t.kind != Token::Kind::kName) return true;
    static const std::set<std::string> kStop = {"else", "or", "and", "if", "is", "in", "not"};
    return kStop.count(t.text) == 0;
  }

  ExprPtr parse_primary() {
    if (at_end()) fail(line(), "expected an expression at the end of the tag");
    const Token& t = toks_[i_];
    auto lit = std::make_shared<Expr>();
    lit->kind = Expr::Kind::kLiteral;
    lit->line = t.line;
    switch (t.kind) {
      case Token::Kind::kString: {
        std::string s;
        while (!at_end() && toks_[i_].kind == Token::Kind::kString) s += toks_[i_++].text;  // 'a' 'b' == 'ab'
        lit->literal = JinjaValue::string(std::move(s));
        return lit;
      }
      case Token::Kind::kInt:
        ++i_;
        lit->literal = int_literal(t);
        return lit;
      case Token::Kind::kFloat:
        ++i_;
        lit->literal = JinjaValue::number(std::strtod(t.text.c_str(), nullptr));  // inf past double, as Python
        return lit;
      case Token::Kind::kName: {
        ++i_;
        if (t.text == "true" || t.text == "True") lit->literal = JinjaValue::boolean(true);
        else if (t.text == "false" || t.text == "False") lit->literal = JinjaValue::boolean(false);
        else if (t.text == "none" || t.text == "None") lit->literal = JinjaValue::none();
        else return make(Expr::Kind::kName, t.text, {});
        return lit;
      }
      case Token::Kind::kOp: break;
    }
    if (accept_op("(")) {
      if (accept_op(")")) return make(Expr::Kind::kList, "tuple", {});
      ExprPtr e = parse_expr();
      if (peek_op(",")) {  // a tuple, kept as a list
        std::vector<ExprPtr> items = {e};
        while (accept_op(",")) {
          if (peek_op(")")) break;
          items.push_back(parse_expr());
        }
        e = make(Expr::Kind::kList, "tuple", std::move(items));
      }
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      std::vector<ExprPtr> items;
      parse_items("]", [&] { items.push_back(parse_expr()); });
      return make(Expr::Kind::kList, "", std::move(items));
    }
    if (accept_op("{")) {
      std::vector<ExprPtr> kv;
      parse_items("}", [&] {
        kv.push_back(parse_expr());
        expect_op(":");
        kv.push_back(parse_expr());
      });
      return make(Expr::Kind::kDict, "", std::move(kv));
    }
    fail(t.line, "unexpected '" + t.text + "'");
  }

  const std::vector<Token>& toks_;
  size_t i_;
  int tag_line_;
  int depth_ = 0;
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  NodeList parse_all() {
    std::string stop;
    return parse_body({}, &stop);
  }

 private:
  // Parses nodes until a statement whose keyword is in `terminators` (returned
  // in *stop, its segment consumed) or the end (then *stop is "").
  NodeList parse_body(const std::set<std::string>& terminators, std::string* stop) {
    const int open_line = i_ < segs_.size() ? segs_[i_].line : 1;
    if (++depth_ > kMaxParseDepth) too_deep(open_line);
    NodeList out;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == Segment::Kind::kText) {
        auto n = node(Node::Kind::kText, seg);
        n->text = seg.text;
        out.push_back(n);
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Kind::kExpr) {
        ExprParser p(seg.tokens, 0, seg.line);
        auto n = node(Node::Kind::kOutput, seg);
        n->expr = p.parse_expr();
        p.expect_end("{{ }}");
        out.push_back(n);
        ++i_;
        continue;
      }
      if (seg.tokens.empty() || seg.tokens[0].kind != Token::Kind::kName) fail(seg.line, "empty or invalid {% %} tag");
      const std::string& kw = seg.tokens[0].text;
      if (terminators.count(kw)) {
        *stop = kw;
        ++i_;
        --depth_;
        return out;
      }
      ++i_;
      if (kw == "if") out.push_back(parse_if(seg));
      else if (kw == "for") out.push_back(parse_for(seg));
      else if (kw == "set") out.push_back(parse_set(seg));
      else if (kw == "macro") out.push_back(parse_macro(seg));
      else if (kw == "call") out.push_back(parse_call(seg));
      else if (kw == "filter") out.push_back(parse_filter_block(seg));
      else if (kw == "generation") append(&out, parse_generation(seg));
      else if (kw == "break" || kw == "continue") out.push_back(parse_loop_control(seg, kw));
      else if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else")
        fail(seg.line, "unexpected {% " + kw + " %}");
      else
        unsupported(seg.line, "the statement {% " + kw + " %}");
    }
    if (!terminators.empty()) {
      std::string expected;
      for (const auto& t : terminators) expected += (expected.empty() ? "" : " or ") + t;
      fail(open_line, "missing {% " + expected + " %}");
    }
    *stop = "";
    --depth_;
    return out;
  }

  static std::shared_ptr<Node> node(Node::Kind kind, const Segment& seg) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->line = seg.line;
    return n;
  }
  static void append(NodeList* out, NodeList more) { out->insert(out->end(), more.begin(), more.end()); }
  const Segment& previous() const { return segs_[i_ - 1]; }

  NodePtr parse_if(const Segment& first) {
    auto n = node(Node::Kind::kIf, first);
    ExprParser p(first.tokens, 1, first.line);
    ExprPtr cond = p.parse_expr();
    p.expect_end("{% if %}");
    while (true) {
      std::string stop;
      NodeList body = parse_body({"elif", "else", "endif"}, &stop);
      n->branches.emplace_back(cond, std::move(body));
      const Segment& seg = previous();
      if (stop == "elif") {
        ExprParser q(seg.tokens, 1, seg.line);
        cond = q.parse_expr();
        q.expect_end("{% elif %}");
        continue;
      }
      if (stop == "else") {
        if (seg.tokens.size() != 1) fail(seg.line, "{% else %} takes no expression");
        n->else_body = parse_body({"endif"}, &stop);
      }
      return n;
    }
  }

  NodePtr parse_for(const Segment& seg) {
    auto n = node(Node::Kind::kFor, seg);
    ExprParser p(seg.tokens, 1, seg.line);
    const bool paren = p.accept_op("(");
    n->targets.push_back(p.expect_name());
    while (p.accept_op(",")) n->targets.push_back(p.expect_name());
    if (paren) p.expect_op(")");
    if (!p.accept_name("in")) fail(seg.line, "expected 'in' in {% for %}");
    n->expr = p.parse_no_cond();
    if (p.accept_name("if")) n->condition = p.parse_no_cond();
    if (p.peek_name("recursive")) unsupported(seg.line, "a recursive loop");
    p.expect_end("{% for %}");
    ++loop_depth_;
    std::string stop;
    n->body = parse_body({"else", "endfor"}, &stop);
    --loop_depth_;
    if (stop == "else") n->else_body = parse_body({"endfor"}, &stop);
    return n;
  }

  NodePtr parse_loop_control(const Segment& seg, const std::string& kw) {
    if (loop_depth_ == 0) fail(seg.line, "{% " + kw + " %} outside a loop");
    if (seg.tokens.size() != 1) fail(seg.line, "{% " + kw + " %} takes no expression");
    return node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, seg);
  }

  NodePtr parse_set(const Segment& seg) {
    auto n = node(Node::Kind::kSet, seg);
    ExprParser p(seg.tokens, 1, seg.line);
    n->targets.push_back(p.expect_name());
    if (p.accept_op(".")) {
      n->targets.push_back(p.expect_name());
      n->attribute = true;
    } else {
      while (p.accept_op(",")) n->targets.push_back(p.expect_name());
    }
    if (p.accept_op("=")) {
      n->expr = p.parse_tuple();
      p.expect_end("{% set %}");
      return n;
    }
    // A block set: {% set x [| filter ...] %} ... {% endset %}
    if (n->targets.size() != 1) fail(seg.line, "a block {% set %} takes one name");
    n->kind = Node::Kind::kSetBlock;
    while (p.accept_op("|")) n->filters.push_back(p.parse_filter(nullptr));
    p.expect_end("{% set %}");
    n->body = parse_scope_body("endset");
    return n;
  }

  // The body of a block that runs apart from where it stands (a {% set %}
  // block, a macro, a call block's caller), up to `end`: a loop around the
  // block is not the body's loop, so break/continue in it need one of its own.
  NodeList parse_scope_body(const std::string& end) {
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string stop;
    NodeList body = parse_body({end}, &stop);
    loop_depth_ = saved;
    return body;
  }

  // A block statement, `{% tag head %} body {% end %}`: `head` parses what
  // follows the tag into the node; the body runs to `end`, apart from an
  // enclosing loop when `scoped` (parse_scope_body).
  template <class Head>
  NodePtr parse_block(const Segment& seg, Node::Kind kind, const char* tag, const std::string& end, bool scoped,
                      Head head) {
    auto n = node(kind, seg);
    ExprParser p(seg.tokens, 1, seg.line);
    head(p, *n);
    p.expect_end(tag);
    std::string stop;
    n->body = scoped ? parse_scope_body(end) : parse_body({end}, &stop);
    return n;
  }

  NodePtr parse_macro(const Segment& seg) {
    return parse_block(seg, Node::Kind::kMacro, "{% macro %}", "endmacro", true, [](ExprParser& p, Node& n) {
      n.text = p.expect_name();
      p.expect_op("(");
      n.params = p.parse_params();
    });
  }

  NodePtr parse_call(const Segment& seg) {
    return parse_block(seg, Node::Kind::kCallBlock, "{% call %}", "endcall", true, [&](ExprParser& p, Node& n) {
      if (p.accept_op("(")) n.params = p.parse_params();
      n.expr = p.parse_expr();
      if (n.expr->kind != Expr::Kind::kCall) fail(seg.line, "{% call %} needs a macro call");
    });
  }

  NodePtr parse_filter_block(const Segment& seg) {
    return parse_block(seg, Node::Kind::kFilterBlock, "{% filter %}", "endfilter", false, [](ExprParser& p, Node& n) {
      n.filters.push_back(p.parse_filter(nullptr));
      while (p.accept_op("|")) n.filters.push_back(p.parse_filter(nullptr));
    });
  }

  // Hugging Face's {% generation %} marks assistant text for training masks;
  // for rendering it is its body.
  NodeList parse_generation(const Segment& seg) {
    if (seg.tokens.size() != 1) fail(seg.line, "{% generation %} takes no expression");
    std::string stop;
    return parse_body({"endgeneration"}, &stop);
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  int depth_ = 0, loop_depth_ = 0;  // loop_depth_: enclosing {% for %} bodies in the current macro/block scope
};

}  // namespace

StatusOr<NodeList> parse_template(std::string_view source) {
  if (source.size() > kMaxTemplateBytes)
    return resource_exhausted("chat template is {} bytes, more than the limit of {} (kMaxTemplateBytes)", source.size(),
                              kMaxTemplateBytes);
  try {
    TemplateParser parser(split_segments(source));
    return parser.parse_all();
  } catch (const JinjaError& e) {
    return Status(e.code, e.message);
  }
}

}  // namespace sluice::jinja
