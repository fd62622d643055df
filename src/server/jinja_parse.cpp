#include "server/jinja_parse.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

namespace sluice::server::jinja {
namespace {

// Thrown inside this file only; parse_template turns it into a Status.
struct ParseError {
  StatusCode code;
  std::string message;
};

[[noreturn]] void syntax_error(int line, const std::string& what) {
  throw ParseError{StatusCode::kInvalidArgument, "chat template line " + std::to_string(line) + ": " + what};
}
[[noreturn]] void unsupported(int line, const std::string& what) {
  throw ParseError{StatusCode::kUnimplemented,
                   "chat template line " + std::to_string(line) + " uses " + what + ", which sluice does not support"};
}

// The value of an integer literal token (digits, '_' ends it as std::stoll did).
// Python's integers are unbounded; one that does not fit int64 is an error.
int64_t int_literal(const std::string& text, int line) {
  int64_t v = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc()) {
    syntax_error(line, "integer literal " + text + " does not fit in 64 bits");
  }
  return v;
}

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the decoded string literal
  int line = 1;
};

// One piece of the template: literal text, an {{ expression }} or a {% statement %}.
struct Segment {
  enum class Kind { kText, kExpr, kStmt };
  Kind kind = Kind::kText;
  std::string text;
  std::vector<Token> tokens;
  int line = 1;
};

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Tokenizes from src[*pos] up to the closing delimiter `close` ("}}" or "%}"),
// honoring a '-' before it. Leaves *pos after the delimiter.
std::vector<Token> lex_tag(std::string_view src, size_t* pos, int* line, const std::string& close, bool* strip_after) {
  std::vector<Token> out;
  size_t i = *pos;
  static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                               "|",  ".",  ",",  ":",  "(",  ")", "[", "]", "{", "}", "="};
  while (true) {
    while (i < src.size() && std::isspace(static_cast<unsigned char>(src[i]))) {
      if (src[i] == '\n') ++*line;
      ++i;
    }
    if (i >= src.size()) syntax_error(*line, "unterminated tag (missing '" + close + "')");
    if (src.compare(i, 2, close) == 0) {
      *pos = i + 2;
      *strip_after = false;
      return out;
    }
    if (src[i] == '-' && src.compare(i + 1, 2, close) == 0) {
      *pos = i + 3;
      *strip_after = true;
      return out;
    }
    if (src[i] == '+' && src.compare(i + 1, 2, close) == 0) {  // "+%}": disable trim_blocks; same as none here
      *pos = i + 3;
      *strip_after = false;
      return out;
    }
    Token t;
    t.line = *line;
    const char c = src[i];
    if (is_ident_start(c)) {
      size_t j = i;
      while (j < src.size() && is_ident(src[j])) ++j;
      t.kind = Token::Kind::kName;
      t.text = std::string(src.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < src.size() && (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_')) ++j;
      t.kind = Token::Kind::kInt;
      if (j + 1 < src.size() && src[j] == '.' && std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
        ++j;
        while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
        t.kind = Token::Kind::kFloat;
      }
      for (char d : src.substr(i, j - i))
        if (d != '_') t.text += d;
      i = j;
    } else if (c == '\'' || c == '"') {
      t.kind = Token::Kind::kString;
      size_t j = i + 1;
      while (true) {
        if (j >= src.size()) syntax_error(t.line, "unterminated string literal");
        char d = src[j];
        if (d == c) break;
        if (d == '\n') ++*line;
        if (d == '\\' && j + 1 < src.size()) {
          const char e = src[j + 1];
          switch (e) {
            case 'n': t.text += '\n'; break;
            case 't': t.text += '\t'; break;
            case 'r': t.text += '\r'; break;
            case '\\': t.text += '\\'; break;
            case '\'': t.text += '\''; break;
            case '"': t.text += '"'; break;
            case '\n': ++*line; break;
            default: t.text += '\\'; t.text += e; break;
          }
          j += 2;
          continue;
        }
        t.text += d;
        ++j;
      }
      i = j + 1;
    } else {
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (src.compare(i, n, op) == 0) {
          t.kind = Token::Kind::kOp;
          t.text = op;
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) syntax_error(*line, std::string("unexpected character '") + c + "'");
    }
    out.push_back(std::move(t));
  }
}

void rstrip_ws(std::string* s) {
  while (!s->empty() && std::isspace(static_cast<unsigned char>(s->back()))) s->pop_back();
}

// Splits the source into segments, applying whitespace control: '-' strips all
// whitespace on that side; trim_blocks drops the newline after a block tag or
// comment; lstrip_blocks drops spaces and tabs between a line start and a block tag.
std::vector<Segment> split_segments(std::string_view src) {
  std::vector<Segment> segs;
  size_t i = 0;
  int line = 1;
  bool strip_next = false;  // previous tag ended with '-'
  bool trim_newline = false;  // previous tag was a block or comment (trim_blocks)
  std::string text;
  int text_line = 1;
  auto flush_text = [&] {
    if (!text.empty()) segs.push_back(Segment{.kind = Segment::Kind::kText, .text = text, .line = text_line});
    text.clear();
  };
  while (i < src.size()) {
    size_t open = src.find('{', i);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string_view::npos;
    std::string_view chunk = src.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    std::string piece(chunk);
    if (strip_next) {
      size_t k = 0;
      while (k < piece.size() && std::isspace(static_cast<unsigned char>(piece[k]))) ++k;
      piece.erase(0, k);
    } else if (trim_newline && !piece.empty() && piece[0] == '\n') {
      piece.erase(0, 1);
    }
    if (text.empty()) text_line = line;
    for (char c : chunk)
      if (c == '\n') ++line;
    if (open == std::string_view::npos) {
      text += piece;
      break;
    }
    const char kind = src[open + 1];
    size_t p = open + 2;
    const bool strip_before = p < src.size() && src[p] == '-';
    const bool keep_before = p < src.size() && src[p] == '+';
    if (strip_before || keep_before) ++p;
    if (strip_before) {
      rstrip_ws(&piece);
    } else if ((kind == '%' || kind == '#') && !keep_before) {
      // lstrip_blocks: the tag starts a line after nothing but spaces and tabs.
      const size_t nl = chunk.find_last_of('\n');
      const size_t from = nl == std::string_view::npos ? 0 : nl + 1;
      const bool line_start = nl != std::string_view::npos || i == 0 || src[i - 1] == '\n';
      if (line_start && chunk.find_first_not_of(" \t", from) == std::string_view::npos) {
        const size_t n_ws = chunk.size() - from;
        piece.erase(piece.size() - std::min(n_ws, piece.size()));
      }
    }
    text += piece;
    if (kind == '#') {
      const size_t end = src.find("#}", p);
      if (end == std::string_view::npos) syntax_error(line, "unterminated comment");
      for (size_t k = p; k < end; ++k)
        if (src[k] == '\n') ++line;
      strip_next = end > p && src[end - 1] == '-';
      trim_newline = true;
      i = end + 2;
      continue;
    }
    flush_text();
    Segment seg;
    seg.kind = kind == '{' ? Segment::Kind::kExpr : Segment::Kind::kStmt;
    seg.line = line;
    seg.tokens = lex_tag(src, &p, &line, kind == '{' ? "}}" : "%}", &strip_next);
    trim_newline = kind == '%';
    segs.push_back(std::move(seg));
    i = p;
  }
  flush_text();
  return segs;
}

const std::set<std::string>& known_filters() {
  static const std::set<std::string> k = {"trim",  "upper", "lower",   "length", "count", "tojson",  "string",
                                          "int",   "float", "first",   "last",   "join",  "default", "d",
                                          "capitalize", "title", "replace", "list", "items", "safe", "abs",
                                          "reverse", "wordcount", "indent"};
  return k;
}

const std::set<std::string>& known_tests() {
  static const std::set<std::string> k = {"defined", "undefined", "none",  "string",   "number",   "integer",
                                          "float",   "mapping",   "iterable", "sequence", "boolean", "true",
                                          "false",   "odd",       "even",  "equalto",  "eq",       "divisibleby",
                                          "callable"};
  return k;
}

// Deepest nesting of (sub)expressions and of if/for blocks: chat templates use a handful.
constexpr int kMaxExprDepth = 64;
constexpr int kMaxBlockDepth = 64;

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t start) : toks_(tokens), i_(start) {}

  size_t pos() const { return i_; }
  bool at_end() const { return i_ >= toks_.size(); }
  int line() const { return at_end() ? (toks_.empty() ? 1 : toks_.back().line) : toks_[i_].line; }
  bool peek_op(const char* op) const { return !at_end() && toks_[i_].kind == Token::Kind::kOp && toks_[i_].text == op; }
  bool peek_name(const char* n) const {
    return !at_end() && toks_[i_].kind == Token::Kind::kName && toks_[i_].text == n;
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
    if (!accept_op(op)) syntax_error(line(), std::string("expected '") + op + "'" + found());
  }
  std::string expect_name() {
    if (at_end() || toks_[i_].kind != Token::Kind::kName) syntax_error(line(), "expected a name" + found());
    return toks_[i_++].text;
  }
  std::string found() const { return at_end() ? " at the end of the tag" : " before '" + toks_[i_].text + "'"; }

  ExprPtr parse_expr() {
    ExprPtr e = parse_or();
    if (accept_name("if")) {
      ExprPtr cond = parse_or();
      ExprPtr other = accept_name("else") ? parse_expr() : nullptr;
      return make(Expr::Kind::kCond, "", {e, cond, other});
    }
    return e;
  }

 private:
  ExprPtr make(Expr::Kind kind, std::string name, std::vector<ExprPtr> operands) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line();
    e->name = std::move(name);
    e->operands = std::move(operands);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (accept_name("or")) l = make(Expr::Kind::kBinary, "or", {l, parse_and()});
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (accept_name("and")) l = make(Expr::Kind::kBinary, "and", {l, parse_not()});
    return l;
  }
  ExprPtr parse_not() {
    if (accept_name("not")) return make(Expr::Kind::kUnary, "not", {parse_not()});
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      std::string op;
      for (const char* c : {"==", "!=", "<=", ">=", "<", ">"})
        if (accept_op(c)) op = c;
      if (op.empty()) {
        if (accept_name("in")) {
          op = "in";
        } else if (peek_name("not") && i_ + 1 < toks_.size() && toks_[i_ + 1].kind == Token::Kind::kName &&
                   toks_[i_ + 1].text == "in") {
          i_ += 2;
          op = "not in";
        } else {
          return l;
        }
      }
      l = make(Expr::Kind::kBinary, op, {l, parse_math1()});
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (true) {
      if (accept_op("+")) l = make(Expr::Kind::kBinary, "+", {l, parse_concat()});
      else if (accept_op("-")) l = make(Expr::Kind::kBinary, "-", {l, parse_concat()});
      else return l;
    }
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (accept_op("~")) l = make(Expr::Kind::kBinary, "~", {l, parse_math2()});
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (true) {
      std::string op;
      for (const char* c : {"//", "*", "/", "%"})
        if (op.empty() && accept_op(c)) op = c;
      if (op.empty()) return l;
      l = make(Expr::Kind::kBinary, op, {l, parse_pow()});
    }
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (accept_op("**")) l = make(Expr::Kind::kBinary, "**", {l, parse_unary(true)});
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    // Every nested subexpression passes here: bound the parser's recursion (and
    // the renderer's, which follows the tree) before it overflows the stack.
    if (++depth_ > kMaxExprDepth) syntax_error(line(), "expression nested deeper than " + std::to_string(kMaxExprDepth));
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    ExprPtr e;
    if (accept_op("-")) e = make(Expr::Kind::kUnary, "-", {parse_unary(false)});
    else if (accept_op("+")) e = parse_unary(false);
    else e = parse_postfix(parse_primary());
    return with_filter ? parse_filters(e) : e;
  }

  void parse_call_args(std::vector<ExprPtr>* positional, std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
    // '(' already consumed.
    bool any = false;
    while (!accept_op(")")) {
      if (any) expect_op(",");
      any = true;
      if (accept_op(")")) return;  // trailing comma
      if (!at_end() && toks_[i_].kind == Token::Kind::kName && i_ + 1 < toks_.size() &&
          toks_[i_ + 1].kind == Token::Kind::kOp && toks_[i_ + 1].text == "=") {
        std::string name = toks_[i_].text;
        i_ += 2;
        kwargs->emplace_back(name, parse_expr());
      } else {
        positional->push_back(parse_expr());
      }
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (accept_op(".")) {
        if (!at_end() && toks_[i_].kind == Token::Kind::kInt) {  // a.0 == a[0]
          auto idx = make(Expr::Kind::kLiteral, "", {});
          const Token& t = toks_[i_++];
          std::const_pointer_cast<Expr>(idx)->literal = JinjaValue::integer(int_literal(t.text, t.line));
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
            if (++part > 2) syntax_error(line(), "too many ':' in a slice");
            continue;
          }
          if (parts[part]) syntax_error(line(), "expected ']'" + found());
          parts[part] = parse_expr();
        }
        if (slice) e = make(Expr::Kind::kSlice, "", {e, parts[0], parts[1], parts[2]});
        else if (parts[0]) e = make(Expr::Kind::kIndex, "", {e, parts[0]});
        else syntax_error(line(), "empty subscript");
      } else if (accept_op("(")) {
        auto call = std::make_shared<Expr>();
        call->kind = Expr::Kind::kCall;
        call->line = line();
        call->operands.push_back(e);
        parse_call_args(&call->operands, &call->kwargs);
        e = call;
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        const int at = line();
        std::string name = expect_name();
        if (!is_known_filter(name)) unsupported(at, "the filter '" + name + "'");
        auto f = std::make_shared<Expr>();
        f->kind = Expr::Kind::kFilter;
        f->line = at;
        f->name = name;
        f->operands.push_back(e);
        if (accept_op("(")) parse_call_args(&f->operands, &f->kwargs);
        e = parse_postfix(f);
      } else if (accept_name("is")) {
        const int at = line();
        const bool negated = accept_name("not");
        std::string name = expect_name();
        if (!is_known_test(name)) unsupported(at, "the test '" + name + "'");
        auto t = std::make_shared<Expr>();
        t->kind = Expr::Kind::kTest;
        t->line = at;
        t->name = name;
        t->negated = negated;
        t->operands.push_back(e);
        if (accept_op("(")) {
          parse_call_args(&t->operands, &t->kwargs);
        } else if (!at_end() && (toks_[i_].kind == Token::Kind::kString || toks_[i_].kind == Token::Kind::kInt ||
                                 toks_[i_].kind == Token::Kind::kFloat)) {
          t->operands.push_back(parse_primary());  // `is divisibleby 3`
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_primary() {
    if (at_end()) syntax_error(line(), "expected an expression at the end of the tag");
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
        lit->literal = JinjaValue::integer(int_literal(t.text, t.line));
        return lit;
      case Token::Kind::kFloat:
        ++i_;
        lit->literal = JinjaValue::number(std::strtod(t.text.c_str(), nullptr));  // inf if too large, as Python
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
      case Token::Kind::kEnd: break;
    }
    if (accept_op("(")) {
      ExprPtr e = parse_expr();
      if (peek_op(",")) unsupported(line(), "a tuple");
      expect_op(")");
      return e;
    }
    if (accept_op("[")) {
      std::vector<ExprPtr> items;
      while (!accept_op("]")) {
        if (!items.empty()) expect_op(",");
        if (accept_op("]")) break;
        items.push_back(parse_expr());
      }
      return make(Expr::Kind::kList, "", std::move(items));
    }
    if (accept_op("{")) {
      std::vector<ExprPtr> kv;
      while (!accept_op("}")) {
        if (!kv.empty()) expect_op(",");
        if (accept_op("}")) break;
        kv.push_back(parse_expr());
        expect_op(":");
        kv.push_back(parse_expr());
      }
      return make(Expr::Kind::kDict, "", std::move(kv));
    }
    syntax_error(t.line, "unexpected '" + t.text + "'");
  }

  const std::vector<Token>& toks_;
  size_t i_;
  int depth_ = 0;  // parse_unary calls in progress
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  NodeList parse_all() {
    std::string stop;
    NodeList body = parse_body({}, &stop);
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `terminators` (returned
  // in *stop, its segment consumed) or the end (then *stop is "").
  NodeList parse_body(const std::set<std::string>& terminators, std::string* stop) {
    // Nested if/for blocks recurse here (and in the renderer): bound the depth.
    if (++depth_ > kMaxBlockDepth) {
      syntax_error(i_ < segs_.size() ? segs_[i_].line : 1, "blocks nested deeper than " + std::to_string(kMaxBlockDepth));
    }
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    NodeList out;
    while (i_ < segs_.size()) {
      const Segment& seg = segs_[i_];
      if (seg.kind == Segment::Kind::kText) {
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kText;
        n->line = seg.line;
        n->text = seg.text;
        out.push_back(n);
        ++i_;
        continue;
      }
      if (seg.kind == Segment::Kind::kExpr) {
        ExprParser p(seg.tokens, 0);
        auto n = std::make_shared<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = seg.line;
        n->expr = p.parse_expr();
        if (!p.at_end()) syntax_error(seg.line, "unexpected '" + seg.tokens[p.pos()].text + "' in {{ }}");
        out.push_back(n);
        ++i_;
        continue;
      }
      if (seg.tokens.empty() || seg.tokens[0].kind != Token::Kind::kName) syntax_error(seg.line, "empty or invalid {% %} tag");
      const std::string& kw = seg.tokens[0].text;
      if (terminators.count(kw)) {
        *stop = kw;
        return out;
      }
      ++i_;
      if (kw == "if") out.push_back(parse_if(seg));
      else if (kw == "for") out.push_back(parse_for(seg));
      else if (kw == "set") out.push_back(parse_set(seg));
      else if (kw == "elif" || kw == "else" || kw == "endif" || kw == "endfor")
        syntax_error(seg.line, "unexpected {% " + kw + " %}");
      else
        unsupported(seg.line, "the statement {% " + kw + " %}");
    }
    if (!terminators.empty()) {
      std::string expected;
      for (const auto& t : terminators) expected += (expected.empty() ? "" : " or ") + t;
      syntax_error(segs_.empty() ? 1 : segs_.back().line, "missing {% " + expected + " %}");
    }
    *stop = "";
    return out;
  }

  ExprPtr parse_tag_expr(const Segment& seg, size_t start) {
    ExprParser p(seg.tokens, start);
    ExprPtr e = p.parse_expr();
    if (!p.at_end()) syntax_error(seg.line, "unexpected '" + seg.tokens[p.pos()].text + "'");
    return e;
  }

  NodePtr parse_if(const Segment& first) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kIf;
    n->line = first.line;
    ExprPtr cond = parse_tag_expr(first, 1);
    while (true) {
      std::string stop;
      NodeList body = parse_body({"elif", "else", "endif"}, &stop);
      n->branches.emplace_back(cond, std::move(body));
      const Segment& seg = segs_[i_++];
      if (stop == "elif") {
        cond = parse_tag_expr(seg, 1);
        continue;
      }
      if (stop == "else") {
        if (seg.tokens.size() != 1) syntax_error(seg.line, "{% else %} takes no expression");
        n->else_body = parse_body({"endif"}, &stop);
        ++i_;
      }
      return n;
    }
  }

  NodePtr parse_for(const Segment& seg) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kFor;
    n->line = seg.line;
    ExprParser p(seg.tokens, 1);
    n->targets.push_back(p.expect_name());
    while (p.accept_op(",")) n->targets.push_back(p.expect_name());
    if (!p.accept_name("in")) syntax_error(seg.line, "expected 'in' in {% for %}");
    // The iterable stops before a trailing `if` filter or `recursive`, which are refused.
    n->expr = p.parse_expr();
    if (!p.at_end()) {
      const std::string& t = seg.tokens[p.pos()].text;
      if (t == "recursive") unsupported(seg.line, "a recursive loop");
      syntax_error(seg.line, "unexpected '" + t + "' in {% for %}");
    }
    if (n->expr->kind == Expr::Kind::kCond && !n->expr->operands[2]) unsupported(seg.line, "a loop filter (for ... if ...)");
    std::string stop;
    n->body = parse_body({"else", "endfor"}, &stop);
    ++i_;
    if (stop == "else") {
      n->else_body = parse_body({"endfor"}, &stop);
      ++i_;
    }
    return n;
  }

  NodePtr parse_set(const Segment& seg) {
    auto n = std::make_shared<Node>();
    n->kind = Node::Kind::kSet;
    n->line = seg.line;
    ExprParser p(seg.tokens, 1);
    n->targets.push_back(p.expect_name());
    if (p.accept_op(".")) n->targets.push_back(p.expect_name());
    if (p.peek_op(",")) unsupported(seg.line, "tuple assignment in {% set %}");
    if (!p.accept_op("=")) unsupported(seg.line, "a block {% set %} ... {% endset %}");
    n->expr = p.parse_expr();
    if (!p.at_end()) syntax_error(seg.line, "unexpected '" + seg.tokens[p.pos()].text + "' in {% set %}");
    return n;
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  int depth_ = 0;  // parse_body calls in progress
};

}  // namespace

bool is_known_filter(const std::string& name) { return known_filters().count(name) != 0; }
bool is_known_test(const std::string& name) { return known_tests().count(name) != 0; }

StatusOr<NodeList> parse_template(std::string_view source) {
  try {
    std::vector<Segment> segs = split_segments(source);
    // keep_trailing_newline=False: one newline at the very end is dropped.
    if (!segs.empty() && segs.back().kind == Segment::Kind::kText && !segs.back().text.empty() &&
        segs.back().text.back() == '\n') {
      segs.back().text.pop_back();
    }
    TemplateParser parser(std::move(segs));
    return parser.parse_all();
  } catch (const ParseError& e) {
    return Status(e.code, e.message);
  }
}

}  // namespace sluice::server::jinja
