#include "server/jinja.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>

#include <fmt/format.h>

namespace sluice::server {
namespace {

using jinja::Expr;
using jinja::ExprPtr;
using jinja::Node;
using jinja::NodeList;
using jinja::NodePtr;

// Thrown inside this file only; render() turns it into a Status.
struct RenderError {
  StatusCode code;
  std::string message;
};

[[noreturn]] void fail(int line, const std::string& what) {
  throw RenderError{StatusCode::kInvalidArgument, "chat template line " + std::to_string(line) + ": " + what};
}
[[noreturn]] void unsupported(int line, const std::string& what) {
  throw RenderError{StatusCode::kUnimplemented,
                    "chat template line " + std::to_string(line) + " uses " + what + ", which sluice does not support"};
}

constexpr size_t kMaxOutputBytes = 64u << 20;
constexpr int64_t kMaxIterations = 10'000'000;

// Splits UTF-8 text into characters (Python iterates code points).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string strip(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

const std::string kWhitespace = " \t\n\r\f\v";

std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count = -1) {
  if (from.empty()) return s;
  size_t pos = 0;
  while (count != 0 && (pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
    --count;
  }
  return s;
}

// Python's json.dumps(ensure_ascii=False) with its default separators, or with
// `indent` spaces per level (then "," and ": ").
void dump_json(const nlohmann::ordered_json& j, int indent, int depth, std::string* out) {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string nl_end = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* item_sep = indent >= 0 ? "," : ", ";
  if (j.is_array()) {
    if (j.empty()) {
      *out += "[]";
      return;
    }
    *out += "[";
    bool first = true;
    for (const auto& e : j) {
      *out += first ? "" : item_sep;
      *out += nl;
      dump_json(e, indent, depth + 1, out);
      first = false;
    }
    *out += nl_end + "]";
  } else if (j.is_object()) {
    if (j.empty()) {
      *out += "{}";
      return;
    }
    *out += "{";
    bool first = true;
    for (const auto& [k, e] : j.items()) {
      *out += first ? "" : item_sep;
      *out += nl + nlohmann::ordered_json(k).dump() + ": ";
      dump_json(e, indent, depth + 1, out);
      first = false;
    }
    *out += nl_end + "}";
  } else {
    *out += j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

class Renderer {
 public:
  explicit Renderer(const nlohmann::json& context) {
    frames_.emplace_back();
    if (context.is_object())
      for (const auto& [k, v] : context.items()) frames_.back()[k] = JinjaValue::from_json(v);
    auto& g = frames_.front();
    g["raise_exception"] = JinjaValue::function([](JinjaArgs& a) -> JinjaValue {
      throw RenderError{StatusCode::kInvalidArgument, "chat template: " + a.get(0, "message").to_output()};
    });
    g["range"] = JinjaValue::function([](JinjaArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else if (a.positional.size() >= 2) {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() >= 3) step = a.positional[2].as_int();
      }
      if (step == 0) throw RenderError{StatusCode::kInvalidArgument, "chat template: range() step must not be zero"};
      JinjaList items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (static_cast<int64_t>(items.size()) >= kMaxIterations)
          throw RenderError{StatusCode::kInvalidArgument, "chat template: range() too large"};
        items.push_back(JinjaValue::integer(i));
        if (__builtin_add_overflow(i, step, &i)) break;  // the next value is past int64, so past stop
      }
      return JinjaValue::list(std::move(items));
    });
    g["namespace"] = JinjaValue::function([](JinjaArgs& a) {
      JinjaDict d;
      for (auto& [k, v] : a.keyword) d.emplace_back(k, v);
      return JinjaValue::dict(std::move(d));
    });
    g["strftime_now"] = JinjaValue::function([](JinjaArgs& a) {
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, a.get(0, "format").to_output().c_str(), &tm);
      return JinjaValue::string(std::string(buf, n));
    });
  }

  void render(const NodeList& nodes, std::string* out) {
    for (const NodePtr& n : nodes) {
      switch (n->kind) {
        case Node::Kind::kText: *out += n->text; break;
        case Node::Kind::kOutput: *out += eval(*n->expr).to_output(); break;
        case Node::Kind::kIf: {
          bool taken = false;
          for (const auto& [cond, body] : n->branches) {
            if (eval(*cond).truthy()) {
              render(body, out);
              taken = true;
              break;
            }
          }
          if (!taken) render(n->else_body, out);
          break;
        }
        case Node::Kind::kFor: render_for(*n, out); break;
        case Node::Kind::kSet: {
          JinjaValue v = eval(*n->expr);
          if (n->targets.size() == 1) {
            frames_.back()[n->targets[0]] = std::move(v);
          } else {
            JinjaValue ns = lookup(n->targets[0]);
            if (!ns.is_dict()) fail(n->line, "'" + n->targets[0] + "' is not a namespace");
            ns.set(n->targets[1], std::move(v));
          }
          break;
        }
      }
      if (out->size() > kMaxOutputBytes) fail(n->line, "output exceeds 64 MiB");
    }
  }

 private:
  JinjaValue lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return JinjaValue();
  }

  JinjaList iterate(const JinjaValue& v, int line) {
    if (v.is_list()) return v.items();
    if (v.is_undefined()) return {};
    if (v.is_dict()) {
      JinjaList keys;
      for (const auto& [k, e] : v.entries()) keys.push_back(JinjaValue::string(k));
      return keys;
    }
    if (v.is_string()) {
      JinjaList chars;
      for (auto& c : utf8_chars(v.as_string())) chars.push_back(JinjaValue::string(std::move(c)));
      return chars;
    }
    fail(line, std::string("'") + v.type_name() + "' object is not iterable");
  }

  void render_for(const Node& n, std::string* out) {
    const JinjaList items = iterate(eval(*n.expr), n.line);
    if (items.empty()) {
      render(n.else_body, out);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > kMaxIterations) fail(n.line, "too many loop iterations");
      frames_.emplace_back();
      auto& f = frames_.back();
      if (n.targets.size() == 1) {
        f[n.targets[0]] = items[static_cast<size_t>(i)];
      } else {
        const JinjaValue& item = items[static_cast<size_t>(i)];
        if (!item.is_list() || item.items().size() != n.targets.size())
          fail(n.line, "cannot unpack a loop item into " + std::to_string(n.targets.size()) + " variables");
        for (size_t t = 0; t < n.targets.size(); ++t) f[n.targets[t]] = item.items()[t];
      }
      f["loop"] = JinjaValue::dict({
          {"index", JinjaValue::integer(i + 1)},
          {"index0", JinjaValue::integer(i)},
          {"revindex", JinjaValue::integer(len - i)},
          {"revindex0", JinjaValue::integer(len - i - 1)},
          {"first", JinjaValue::boolean(i == 0)},
          {"last", JinjaValue::boolean(i == len - 1)},
          {"length", JinjaValue::integer(len)},
          {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : JinjaValue()},
          {"nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : JinjaValue()},
      });
      render(n.body, out);
      frames_.pop_back();
    }
  }

  JinjaValue eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kAttr: {
        JinjaValue obj = eval(*e.operands[0]);
        if (obj.is_undefined()) fail(e.line, "cannot read '." + e.name + "' of an undefined value");
        return obj.get(e.name);
      }
      case Expr::Kind::kIndex: return index(eval(*e.operands[0]), eval(*e.operands[1]), e.line);
      case Expr::Kind::kSlice: return slice(e);
      case Expr::Kind::kCall: return call(e);
      case Expr::Kind::kFilter: return filter(e);
      case Expr::Kind::kTest: {
        const bool r = test(e);
        return JinjaValue::boolean(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        JinjaValue v = eval(*e.operands[0]);
        if (e.name == "not") return JinjaValue::boolean(!v.truthy());
        if (v.kind() == JinjaValue::Kind::kFloat) return JinjaValue::number(-v.as_double());
        if (v.is_number()) {
          if (v.as_int() == INT64_MIN) fail(e.line, "integer overflow in unary -");
          return JinjaValue::integer(-v.as_int());
        }
        fail(e.line, std::string("bad operand type for unary -: '") + v.type_name() + "'");
      }
      case Expr::Kind::kBinary: return binary(e);
      case Expr::Kind::kCond: {
        if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
        return e.operands[2] ? eval(*e.operands[2]) : JinjaValue();
      }
      case Expr::Kind::kList: {
        JinjaList items;
        for (const auto& o : e.operands) items.push_back(eval(*o));
        return JinjaValue::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        JinjaValue d = JinjaValue::dict();
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) d.set(eval(*e.operands[i]).to_output(), eval(*e.operands[i + 1]));
        return d;
      }
    }
    return JinjaValue();
  }

  JinjaValue index(const JinjaValue& obj, const JinjaValue& key, int line) {
    if (obj.is_undefined()) fail(line, "cannot index an undefined value");
    if (obj.is_dict()) return obj.get(key.to_output());
    if ((obj.is_list() || obj.is_string()) && key.is_number()) {
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.items().size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        return i >= 0 && i < n ? obj.items()[static_cast<size_t>(i)] : JinjaValue();
      }
      auto chars = utf8_chars(obj.as_string());
      const int64_t n = static_cast<int64_t>(chars.size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      return i >= 0 && i < n ? JinjaValue::string(chars[static_cast<size_t>(i)]) : JinjaValue();
    }
    return JinjaValue();
  }

  JinjaValue slice(const Expr& e) {
    JinjaValue obj = eval(*e.operands[0]);
    auto opt = [&](int k) -> std::optional<int64_t> {
      if (!e.operands[static_cast<size_t>(k)]) return std::nullopt;
      JinjaValue v = eval(*e.operands[static_cast<size_t>(k)]);
      if (v.is_none()) return std::nullopt;
      return v.as_int();
    };
    const std::optional<int64_t> start = opt(1), stop = opt(2), step_opt = opt(3);
    const int64_t step = step_opt.value_or(1);
    if (step == 0) fail(e.line, "slice step cannot be zero");
    JinjaList src;
    std::vector<std::string> chars;
    if (obj.is_list()) src = obj.items();
    else if (obj.is_string()) chars = utf8_chars(obj.as_string());
    else fail(e.line, std::string("cannot slice '") + obj.type_name() + "'");
    const int64_t n = static_cast<int64_t>(obj.is_list() ? src.size() : chars.size());
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      return step > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(start, step > 0 ? 0 : n - 1), en = clamp(stop, step > 0 ? n : -1);
    JinjaList items;
    std::string s;
    for (int64_t i = b; step > 0 ? i < en : i > en; i += step) {
      if (obj.is_list()) items.push_back(src[static_cast<size_t>(i)]);
      else s += chars[static_cast<size_t>(i)];
    }
    return obj.is_list() ? JinjaValue::list(std::move(items)) : JinjaValue::string(std::move(s));
  }

  JinjaArgs eval_args(const Expr& e, size_t first) {
    JinjaArgs a;
    for (size_t i = first; i < e.operands.size(); ++i) a.positional.push_back(eval(*e.operands[i]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
  }

  JinjaValue call(const Expr& e) {
    const Expr& callee = *e.operands[0];
    JinjaArgs args = eval_args(e, 1);
    if (callee.kind == Expr::Kind::kAttr) {
      JinjaValue obj = eval(*callee.operands[0]);
      JinjaValue member = obj.get(callee.name);
      if (member.is_function()) return member.fn()(args);
      return method(obj, callee.name, args, e.line);
    }
    JinjaValue fn = eval(callee);
    if (!fn.is_function()) {
      if (callee.kind == Expr::Kind::kName && fn.is_undefined()) unsupported(e.line, "the function '" + callee.name + "'");
      fail(e.line, std::string("'") + fn.type_name() + "' object is not callable");
    }
    return fn.fn()(args);
  }

  JinjaValue method(const JinjaValue& obj, const std::string& name, JinjaArgs& a, int line) {
    if (obj.is_string()) {
      const std::string& s = obj.as_string();
      const JinjaValue chars_arg = a.get(0, "chars");
      const std::string chars = chars_arg.is_string() ? chars_arg.as_string() : kWhitespace;
      if (name == "strip") return JinjaValue::string(strip(s, chars, true, true));
      if (name == "lstrip") return JinjaValue::string(strip(s, chars, true, false));
      if (name == "rstrip") return JinjaValue::string(strip(s, chars, false, true));
      if (name == "upper" || name == "lower") {
        std::string r = s;
        for (char& c : r) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                                : std::tolower(static_cast<unsigned char>(c)));
        return JinjaValue::string(r);
      }
      if (name == "title" || name == "capitalize") return string_filter(name, s);
      if (name == "startswith" || name == "endswith") {
        JinjaValue arg = a.get(0, "prefix");
        std::vector<std::string> options;
        if (arg.is_list()) for (const auto& o : arg.items()) options.push_back(o.to_output());
        else options.push_back(arg.to_output());
        for (const auto& o : options) {
          if (name == "startswith" ? s.rfind(o, 0) == 0
                                   : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)
            return JinjaValue::boolean(true);
        }
        return JinjaValue::boolean(false);
      }
      if (name == "split") {
        JinjaValue sep = a.get(0, "sep");
        int64_t maxsplit = a.get(1, "maxsplit").is_number() ? a.get(1, "maxsplit").as_int() : -1;
        JinjaList parts;
        if (!sep.is_string()) {  // whitespace runs, no empty parts
          size_t i = 0;
          while (true) {
            while (i < s.size() && kWhitespace.find(s[i]) != std::string::npos) ++i;
            if (i >= s.size()) break;
            if (maxsplit == 0) {
              parts.push_back(JinjaValue::string(strip(s.substr(i), kWhitespace, false, true)));
              break;
            }
            size_t j = i;
            while (j < s.size() && kWhitespace.find(s[j]) == std::string::npos) ++j;
            parts.push_back(JinjaValue::string(s.substr(i, j - i)));
            --maxsplit;
            i = j;
          }
        } else {
          const std::string& d = sep.as_string();
          if (d.empty()) fail(line, "split(): empty separator");
          size_t i = 0, j;
          while (maxsplit != 0 && (j = s.find(d, i)) != std::string::npos) {
            parts.push_back(JinjaValue::string(s.substr(i, j - i)));
            i = j + d.size();
            --maxsplit;
          }
          parts.push_back(JinjaValue::string(s.substr(i)));
        }
        return JinjaValue::list(std::move(parts));
      }
      if (name == "replace") {
        const int64_t count = a.get(2, "count").is_number() ? a.get(2, "count").as_int() : -1;
        return JinjaValue::string(replace_all(s, a.get(0, "old").to_output(), a.get(1, "new").to_output(), count));
      }
      if (name == "find") {
        const size_t p = s.find(a.get(0, "sub").to_output());
        return JinjaValue::integer(p == std::string::npos ? -1 : static_cast<int64_t>(p));
      }
      if (name == "join") {
        std::string r;
        JinjaList items = iterate(a.get(0, "iterable"), line);
        for (size_t i = 0; i < items.size(); ++i) r += (i ? s : "") + items[i].to_output();
        return JinjaValue::string(r);
      }
    } else if (obj.is_dict()) {
      if (name == "items") {
        JinjaList pairs;
        for (const auto& [k, v] : obj.entries()) pairs.push_back(JinjaValue::list({JinjaValue::string(k), v}));
        return JinjaValue::list(std::move(pairs));
      }
      if (name == "keys" || name == "values") {
        JinjaList r;
        for (const auto& [k, v] : obj.entries()) r.push_back(name == "keys" ? JinjaValue::string(k) : v);
        return JinjaValue::list(std::move(r));
      }
      if (name == "get") {
        JinjaValue v = obj.get(a.get(0, "key").to_output());
        return v.is_undefined() ? (a.positional.size() > 1 ? a.positional[1] : JinjaValue::none()) : v;
      }
    } else if (obj.is_undefined()) {
      fail(line, "cannot call '." + name + "()' on an undefined value");
    }
    unsupported(line, std::string("the method '") + obj.type_name() + "." + name + "()'");
  }

  JinjaValue string_filter(const std::string& name, const std::string& s) {
    std::string r = s;
    if (name == "capitalize") {
      for (size_t i = 0; i < r.size(); ++i)
        r[i] = static_cast<char>(i == 0 ? std::toupper(static_cast<unsigned char>(r[i]))
                                        : std::tolower(static_cast<unsigned char>(r[i])));
    } else {  // title
      bool start = true;
      for (char& c : r) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c));
        c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        start = !alpha;
      }
    }
    return JinjaValue::string(r);
  }

  JinjaValue filter(const Expr& e) {
    JinjaValue v = eval(*e.operands[0]);
    JinjaArgs a = eval_args(e, 1);
    const std::string& f = e.name;
    if (f == "default" || f == "d") {
      const bool boolean = a.get(1, "boolean").truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value").is_undefined() ? JinjaValue::string("") : a.get(0, "default_value");
      return v;
    }
    if (f == "safe") return v;
    if (f == "string") return JinjaValue::string(v.to_output());
    if (f == "tojson") {
      JinjaValue indent = a.get(0, "indent");
      std::string out;
      dump_json(v.to_json(), indent.is_number() ? static_cast<int>(indent.as_int()) : -1, 0, &out);
      return JinjaValue::string(out);
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return JinjaValue::integer(static_cast<int64_t>(utf8_chars(v.as_string()).size()));
      if (v.is_list()) return JinjaValue::integer(static_cast<int64_t>(v.items().size()));
      if (v.is_dict()) return JinjaValue::integer(static_cast<int64_t>(v.entries().size()));
      if (v.is_undefined()) return JinjaValue::integer(0);
      fail(e.line, std::string("object of type '") + v.type_name() + "' has no length");
    }
    if (f == "list") return JinjaValue::list(iterate(v, e.line));
    if (f == "first" || f == "last") {
      JinjaList items = iterate(v, e.line);
      if (items.empty()) return JinjaValue();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "reverse") {
      if (v.is_string()) {
        auto chars = utf8_chars(v.as_string());
        std::string r;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) r += *it;
        return JinjaValue::string(r);
      }
      JinjaList items = iterate(v, e.line);
      std::reverse(items.begin(), items.end());
      return JinjaValue::list(std::move(items));
    }
    if (f == "join") {
      std::string sep = a.get(0, "d").is_undefined() ? "" : a.get(0, "d").to_output(), r;
      JinjaList items = iterate(v, e.line);
      for (size_t i = 0; i < items.size(); ++i) r += (i ? sep : "") + items[i].to_output();
      return JinjaValue::string(r);
    }
    if (f == "items") {
      JinjaArgs none;
      return method(v, "items", none, e.line);
    }
    if (f == "int") {
      if (v.is_string()) {
        try {
          return JinjaValue::integer(std::stoll(v.as_string()));
        } catch (...) {
          return JinjaValue::integer(0);
        }
      }
      return JinjaValue::integer(v.as_int());
    }
    if (f == "float") {
      if (v.is_string()) {
        try {
          return JinjaValue::number(std::stod(v.as_string()));
        } catch (...) {
          return JinjaValue::number(0);
        }
      }
      return JinjaValue::number(v.as_double());
    }
    if (f == "abs") {
      if (v.kind() == JinjaValue::Kind::kFloat) return JinjaValue::number(std::fabs(v.as_double()));
      return JinjaValue::integer(std::llabs(v.as_int()));
    }
    const std::string s = v.to_output();
    if (f == "trim") {
      const JinjaValue chars = a.get(0, "chars");
      return JinjaValue::string(strip(s, chars.is_string() ? chars.as_string() : kWhitespace, true, true));
    }
    if (f == "upper" || f == "lower") {
      JinjaArgs none;
      return method(JinjaValue::string(s), f, none, e.line);
    }
    if (f == "capitalize" || f == "title") return string_filter(f, s);
    if (f == "replace") return JinjaValue::string(replace_all(s, a.get(0, "old").to_output(), a.get(1, "new").to_output()));
    if (f == "wordcount") {
      JinjaArgs none;
      return JinjaValue::integer(static_cast<int64_t>(method(JinjaValue::string(s), "split", none, e.line).items().size()));
    }
    if (f == "indent") {
      const int64_t width = a.get(0, "width").is_number() ? a.get(0, "width").as_int() : 4;
      const bool first = a.get(1, "first").truthy();
      const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
      std::string r = first && !s.empty() ? pad : "";
      for (size_t i = 0; i < s.size(); ++i) {
        r += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') r += pad;
      }
      return JinjaValue::string(r);
    }
    unsupported(e.line, "the filter '" + f + "'");
  }

  bool test(const Expr& e) {
    JinjaValue v = eval(*e.operands[0]);
    JinjaArgs a = eval_args(e, 1);
    const std::string& t = e.name;
    using K = JinjaValue::Kind;
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.kind() == K::kInt;
    if (t == "float") return v.kind() == K::kFloat;
    if (t == "boolean") return v.kind() == K::kBool;
    if (t == "true") return v.kind() == K::kBool && v.as_bool();
    if (t == "false") return v.kind() == K::kBool && !v.as_bool();
    if (t == "mapping") return v.is_dict();
    if (t == "iterable" || t == "sequence") return v.is_list() || v.is_dict() || v.is_string();
    if (t == "callable") return v.is_function();
    if (t == "odd" || t == "even") return v.is_number() && (((v.as_int() % 2) != 0) == (t == "odd"));
    if (t == "equalto" || t == "eq") return v.equals(a.get(0, "other"));
    if (t == "divisibleby") {
      const int64_t d = a.get(0, "num").as_int();
      return d != 0 && v.as_int() % d == 0;
    }
    unsupported(e.line, "the test '" + t + "'");
  }

  static int64_t py_mod(int64_t a, int64_t b) {
    const int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }

  JinjaValue binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      JinjaValue l = eval(*e.operands[0]);
      return l.truthy() ? eval(*e.operands[1]) : l;
    }
    if (op == "or") {
      JinjaValue l = eval(*e.operands[0]);
      return l.truthy() ? l : eval(*e.operands[1]);
    }
    JinjaValue l = eval(*e.operands[0]);
    JinjaValue r = eval(*e.operands[1]);
    if (op == "==") return JinjaValue::boolean(l.equals(r));
    if (op == "!=") return JinjaValue::boolean(!l.equals(r));
    if (op == "~") return JinjaValue::string(l.to_output() + r.to_output());
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) fail(e.line, "'in <string>' requires a string on the left");
        found = r.as_string().find(l.as_string()) != std::string::npos;
      } else if (r.is_list()) {
        for (const auto& x : r.items()) found = found || x.equals(l);
      } else if (r.is_dict()) {
        found = !r.get(l.to_output()).is_undefined();
      } else if (!r.is_undefined()) {
        fail(e.line, std::string("argument of type '") + r.type_name() + "' is not iterable");
      }
      return JinjaValue::boolean(op == "in" ? found : !found);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int cmp;
      if (l.is_number() && r.is_number()) cmp = l.as_double() < r.as_double() ? -1 : l.as_double() > r.as_double() ? 1 : 0;
      else if (l.is_string() && r.is_string()) cmp = l.as_string().compare(r.as_string());
      else fail(e.line, std::string("'") + op + "' not supported between '" + l.type_name() + "' and '" + r.type_name() + "'");
      return JinjaValue::boolean(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) return JinjaValue::string(l.as_string() + r.as_string());
      if (l.is_list() && r.is_list()) {
        JinjaList items = l.items();
        items.insert(items.end(), r.items().begin(), r.items().end());
        return JinjaValue::list(std::move(items));
      }
    }
    if (op == "*" && l.is_string() && r.is_number()) {
      std::string s;
      for (int64_t i = 0; i < r.as_int() && s.size() <= kMaxOutputBytes; ++i) s += l.as_string();
      return JinjaValue::string(s);
    }
    if (!l.is_number() || !r.is_number())
      fail(e.line, std::string("unsupported operand types for ") + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
    const bool real = l.kind() == JinjaValue::Kind::kFloat || r.kind() == JinjaValue::Kind::kFloat;
    if (op == "/") {
      if (r.as_double() == 0) fail(e.line, "division by zero");
      return JinjaValue::number(l.as_double() / r.as_double());
    }
    if ((op == "//" || op == "%") && r.as_double() == 0) fail(e.line, "division by zero");
    if (real) {
      const double a = l.as_double(), b = r.as_double();
      if (op == "+") return JinjaValue::number(a + b);
      if (op == "-") return JinjaValue::number(a - b);
      if (op == "*") return JinjaValue::number(a * b);
      if (op == "//") return JinjaValue::number(std::floor(a / b));
      if (op == "%") return JinjaValue::number(a - b * std::floor(a / b));
      if (op == "**") return JinjaValue::number(std::pow(a, b));
    } else {
      // Python integers are unbounded, ours are 64-bit: a result that does not
      // fit is an error rather than undefined behaviour.
      const int64_t a = l.as_int(), b = r.as_int();
      int64_t v = 0;
      const auto fits = [&](bool overflow) {
        if (overflow) fail(e.line, "integer overflow in '" + op + "'");
        return JinjaValue::integer(v);
      };
      if (op == "+") return fits(__builtin_add_overflow(a, b, &v));
      if (op == "-") return fits(__builtin_sub_overflow(a, b, &v));
      if (op == "*") return fits(__builtin_mul_overflow(a, b, &v));
      if ((op == "//" || op == "%") && a == INT64_MIN && b == -1) fits(true);
      if (op == "//") return JinjaValue::integer(a / b - (a % b != 0 && (a < 0) != (b < 0)));  // floor
      if (op == "%") return JinjaValue::integer(py_mod(a, b));
      if (op == "**") {
        const double p = std::pow(a, b);
        if (b < 0) return JinjaValue::number(p);
        if (!(p >= -0x1p63 && p < 0x1p63)) fits(true);
        v = static_cast<int64_t>(p);
        return fits(false);
      }
    }
    unsupported(e.line, "the operator '" + op + "'");
  }

  std::vector<std::map<std::string, JinjaValue>> frames_;
  int64_t iterations_ = 0;
};

}  // namespace

StatusOr<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
  ASSIGN_OR_RETURN(jinja::NodeList nodes, jinja::parse_template(source));
  return JinjaTemplate(std::move(nodes));
}

StatusOr<std::string> JinjaTemplate::render(const nlohmann::json& context) const {
  try {
    Renderer r(context);
    std::string out;
    r.render(nodes_, &out);
    return out;
  } catch (const RenderError& e) {
    return Status(e.code, e.message);
  }
}

}  // namespace sluice::server
