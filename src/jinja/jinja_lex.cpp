#include "jinja/jinja_lex.h"

#include <cctype>

#include "jinja/jinja_error.h"

namespace sluice::jinja {
namespace {

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Tokenizes from src[*pos] up to the closing delimiter `close` ("}}" or "%}"),
// honoring a '-' before it. Leaves *pos after the delimiter.
std::vector<Token> lex_tag(std::string_view src, size_t* pos, int* line, const std::string& close, bool* strip_after,
                           bool* keep_after) {
  std::vector<Token> out;
  size_t i = *pos;
  int open_brackets = 0;  // ( [ { not yet closed: "}}" inside them is two '}' (as jinja2 lexes it)
  static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                               "|",  ".",  ",",  ":",  "(",  ")", "[", "]", "{", "}", "="};
  while (true) {
    while (i < src.size() && std::isspace(static_cast<unsigned char>(src[i]))) {
      if (src[i] == '\n') ++*line;
      ++i;
    }
    if (i >= src.size()) fail(*line, "unterminated tag (missing '" + close + "')");
    if (open_brackets == 0 && src.compare(i, 2, close) == 0) {
      *pos = i + 2;
      *strip_after = false;
      *keep_after = false;
      return out;
    }
    if (open_brackets == 0 && src[i] == '-' && src.compare(i + 1, 2, close) == 0) {
      *pos = i + 3;
      *strip_after = true;
      *keep_after = false;
      return out;
    }
    if (open_brackets == 0 && src[i] == '+' && src.compare(i + 1, 2, close) == 0) {  // "+%}": trim_blocks off for this tag
      *pos = i + 3;
      *strip_after = false;
      *keep_after = true;
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
      // An exponent: 1e20, 2.5E-3.
      size_t e = j + 1;
      if (e < src.size() && (src[e] == '+' || src[e] == '-')) ++e;
      if (j < src.size() && (src[j] == 'e' || src[j] == 'E') && e < src.size() &&
          std::isdigit(static_cast<unsigned char>(src[e]))) {
        j = e;
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
        if (j >= src.size()) fail(t.line, "unterminated string literal");
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
          if (n == 1 && (*op == '(' || *op == '[' || *op == '{')) ++open_brackets;
          if (n == 1 && (*op == ')' || *op == ']' || *op == '}') && open_brackets > 0) --open_brackets;
          break;
        }
      }
      if (!matched) fail(*line, std::string("unexpected character '") + c + "'");
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
std::vector<Segment> split_all(std::string_view src) {
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
      if (end == std::string_view::npos) fail(line, "unterminated comment");
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
    bool keep_newline = false;  // "+%}": trim_blocks off for this tag
    seg.tokens = lex_tag(src, &p, &line, kind == '{' ? "}}" : "%}", &strip_next, &keep_newline);
    trim_newline = kind == '%' && !keep_newline;
    segs.push_back(std::move(seg));
    i = p;
  }
  flush_text();
  return segs;
}

}  // namespace

std::vector<Segment> split_segments(std::string_view source) {
  std::vector<Segment> segs = split_all(source);
  if (!segs.empty() && segs.back().kind == Segment::Kind::kText && !segs.back().text.empty() &&
      segs.back().text.back() == '\n') {
    segs.back().text.pop_back();
  }
  return segs;
}

}  // namespace sluice::jinja
