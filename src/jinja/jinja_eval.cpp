// Expressions of the Jinja renderer: names, attributes, indexing, slicing,
// calls and operators, with Python's semantics (jinja_render.h).
#include <string.h>  // memmem

#include <algorithm>
#include <string_view>
#include <cmath>
#include <optional>
#include <unordered_set>

#include "jinja/jinja_limits.h"
#include "jinja/jinja_render.h"

namespace sluice::jinja {

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

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

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  const std::vector<std::string> cs = utf8_chars(s);
  const std::vector<std::string> chars_list = utf8_chars(chars);
  const std::unordered_set<std::string> set(chars_list.begin(), chars_list.end());
  auto in_set = [&](const std::string& c) { return set.count(c) != 0; };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && in_set(cs[b])) ++b;
  if (right)
    while (e > b && in_set(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

size_t find_text(const std::string& hay, const std::string& needle, size_t pos) {
  if (pos > hay.size()) return std::string::npos;
  const void* hit = memmem(hay.data() + pos, hay.size() - pos, needle.data(), needle.size());
  return hit ? static_cast<size_t>(static_cast<const char*>(hit) - hay.data()) : std::string::npos;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0, hit;
  while (count != 0 && (hit = find_text(s, from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --count;
    if (out.size() > kMaxOutputBytes) return out;  // the caller's size check reports it
  }
  out.append(s, pos);
  return out;
}

namespace {

int compare_at(const JinjaValue& a, const JinjaValue& b, int line, int depth) {
  if (depth > kMaxRenderDepth)
    over_limit(line, "comparing values nested more than " + std::to_string(kMaxRenderDepth) +
                         " levels deep (limit kMaxRenderDepth)");
  if (a.is_number() && b.is_number()) {
    if (a.kind() != JinjaValue::Kind::kFloat && b.kind() != JinjaValue::Kind::kFloat)
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 bytes sort as code points
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  // A tuple compares with a tuple, a list with a list, item by item.
  if (a.is_list() && b.is_list() && std::string_view(a.type_name()) == b.type_name()) {
    const JinjaList& x = a.items();
    const JinjaList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return compare_at(x[i], y[i], line, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) fail(line, a.undefined_hint());
  if (b.is_undefined()) fail(line, b.undefined_hint());
  fail(line, std::string("'<' not supported between instances of '") + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace

int compare_values(const JinjaValue& a, const JinjaValue& b, int line) { return compare_at(a, b, line, 0); }

void py_sort(JinjaList& items, JinjaList keys, bool reverse, int line) {
  const size_t n = items.size();
  if (n < 2) return;
  if (reverse) {  // as list.sort does: reverse, sort, reverse back (equal items keep their order)
    std::reverse(items.begin(), items.end());
    std::reverse(keys.begin(), keys.end());
  }
  auto less = [&](size_t i, size_t j) { return compare_values(keys[i], keys[j], line) < 0; };
  std::vector<size_t> order(n);  // order[k]: the index in items of the k-th sorted item
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (n >= 64) {
    std::stable_sort(order.begin(), order.end(), less);
  } else {
    // CPython's path for short lists: the leading run (strictly descending
    // runs are reversed), then binary insertion of the rest.
    size_t run = 2;
    if (less(1, 0)) {
      while (run < n && less(run, run - 1)) ++run;
      std::reverse(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(run));
    } else {
      while (run < n && !less(run, run - 1)) ++run;
    }
    for (size_t i = run; i < n; ++i) {
      const size_t pivot = order[i];
      size_t l = 0, r = i;
      do {
        const size_t p = l + ((r - l) >> 1);
        if (less(pivot, order[p])) r = p;
        else l = p + 1;
      } while (l < r);
      std::move_backward(order.begin() + static_cast<std::ptrdiff_t>(l), order.begin() + static_cast<std::ptrdiff_t>(i),
                         order.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      order[l] = pivot;
    }
  }
  JinjaList sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  if (reverse) std::reverse(items.begin(), items.end());
}

JinjaValue Renderer::eval(const Expr& e) {
  DepthGuard guard(this, e.line);
  return eval_expr(e);
}

JinjaValue Renderer::eval_expr(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kAttr: return eval_attr(e);
    case Expr::Kind::kIndex: return index(eval(*e.operands[0]), eval(*e.operands[1]), e.line);
    case Expr::Kind::kSlice: return slice(e);
    case Expr::Kind::kCall: return call(e);
    case Expr::Kind::kFilter: {
      JinjaValue v = eval(*e.operands[0]);
      JinjaArgs a = eval_args(e, 1);
      return apply_filter(e.name, v, a, e.line);
    }
    case Expr::Kind::kTest: {
      JinjaValue v = eval(*e.operands[0]);
      JinjaArgs a = eval_args(e, 1);
      const bool r = apply_test(e.name, v, a, e.line);
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
      if (v.is_undefined()) undefined_error(v, e.line);
      fail(e.line, std::string("bad operand type for unary -: '") + v.type_name() + "'");
    }
    case Expr::Kind::kBinary: return binary(e);
    case Expr::Kind::kCond: {
      if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
      return e.operands[2] ? eval(*e.operands[2]) : JinjaValue::undefined("the conditional expression had no else");
    }
    case Expr::Kind::kList: {
      JinjaList items;
      for (const auto& o : e.operands) items.push_back(eval(*o));
      return e.name == "tuple" ? JinjaValue::tuple(std::move(items)) : JinjaValue::list(std::move(items));
    }
    case Expr::Kind::kDict: {  // keys keep their type: {1: 'a'} has the int key 1
      JinjaValue d = JinjaValue::dict();
      for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
        JinjaValue key = eval(*e.operands[i]);
        if (!key.hashable()) fail(e.line, std::string("unhashable type: '") + key.type_name() + "'");
        d.set(key, eval(*e.operands[i + 1]));
      }
      return d;
    }
  }
  return JinjaValue();
}

// obj.name: a dict's key; otherwise undefined with jinja2's hint. Reading an
// attribute of an undefined value fails, as in jinja2.
JinjaValue Renderer::eval_attr(const Expr& e) {
  JinjaValue obj = eval(*e.operands[0]);
  if (obj.is_undefined()) undefined_error(obj, e.line);
  if (obj.is_none()) return JinjaValue::undefined("'None' has no attribute '" + e.name + "'");
  return obj.get(e.name);
}

JinjaValue Renderer::index(const JinjaValue& obj, const JinjaValue& key, int line) {
  if (obj.is_undefined()) undefined_error(obj, line);
  if (obj.is_dict()) return obj.get(key);
  if ((obj.is_list() || obj.is_string()) && key.is_number()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
      return JinjaValue::undefined("list index " + std::to_string(key.as_int()) + " out of range");
    }
    auto chars = utf8_chars(obj.as_string());
    const int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return JinjaValue::string(chars[static_cast<size_t>(i)]);
    return JinjaValue::undefined("string index " + std::to_string(key.as_int()) + " out of range");
  }
  return obj.get(key);  // undefined, with jinja2's hint
}

JinjaValue Renderer::slice(const Expr& e) {
  JinjaValue obj = eval(*e.operands[0]);
  auto opt = [&](size_t k) -> std::optional<int64_t> {
    if (!e.operands[k]) return std::nullopt;
    JinjaValue v = eval(*e.operands[k]);
    if (v.is_none()) return std::nullopt;
    if (!v.is_number()) fail(e.line, "slice indices must be integers or None");
    return v.as_int();
  };
  const std::optional<int64_t> start = opt(1), stop = opt(2), step_opt = opt(3);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) fail(e.line, "slice step cannot be zero");
  if (obj.is_undefined()) undefined_error(obj, e.line);
  JinjaList src;
  std::vector<std::string> chars;
  if (obj.is_list()) src = obj.items();
  else if (obj.is_string()) chars = utf8_chars(obj.as_string());
  else fail(e.line, std::string("'") + obj.type_name() + "' object is not subscriptable");
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

JinjaArgs Renderer::eval_args(const Expr& e, size_t first) {
  JinjaArgs a;
  for (size_t i = first; i < e.operands.size(); ++i) a.positional.push_back(eval(*e.operands[i]));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
  return a;
}

JinjaValue Renderer::call_value(const JinjaValue& fn, JinjaArgs& args, int line) {
  if (fn.is_undefined()) undefined_error(fn, line);
  if (!fn.is_function()) fail(line, std::string("'") + fn.type_name() + "' object is not callable");
  return fn.fn()(args);
}

// f(args), or obj.method(args): a dict entry holding a function (a macro in a
// namespace) is called; otherwise the Python method of the value's type.
JinjaValue Renderer::call(const Expr& e) {
  const Expr& callee = *e.operands[0];
  if (callee.kind == Expr::Kind::kAttr) {
    JinjaValue obj = eval(*callee.operands[0]);
    JinjaArgs args = eval_args(e, 1);
    if (obj.is_undefined()) undefined_error(obj, e.line);
    if (obj.is_dict()) {
      JinjaValue member = obj.get(callee.name);
      if (member.is_function()) return member.fn()(args);
    }
    return call_method(obj, callee.name, args, e.line);
  }
  JinjaValue fn = eval(callee);
  // A name that is nowhere defined is most likely a function sluice lacks:
  // kUnimplemented, so ChatTemplate's trial render refuses the template at load.
  if (callee.kind == Expr::Kind::kName && fn.is_undefined()) unsupported(e.line, "the function '" + callee.name + "'");
  JinjaArgs args = eval_args(e, 1);
  return call_value(fn, args, e.line);
}

namespace {

int64_t py_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

}  // namespace

JinjaValue Renderer::binary(const Expr& e) {
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
  if (op == "~") {
    std::string s = l.to_output();
    const std::string rs = r.to_output();
    check_size(s.size() + rs.size(), e.line);
    return JinjaValue::string(s + rs);
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_string()) {
      if (!l.is_string()) fail(e.line, std::string("'in <string>' requires string as left operand, not ") + l.type_name());
      found = find_text(r.as_string(), l.as_string()) != std::string::npos;
    } else if (r.is_list()) {
      for (const auto& x : r.items()) found = found || x.equals(l);
    } else if (r.is_dict()) {
      if (!l.hashable()) fail(e.line, std::string("unhashable type: '") + l.type_name() + "'");
      found = r.find(l) != nullptr;
    } else if (!r.is_undefined()) {
      fail(e.line, std::string("argument of type '") + r.type_name() + "' is not iterable");
    }
    return JinjaValue::boolean(op == "in" ? found : !found);
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    const int cmp = compare_values(l, r, e.line);
    return JinjaValue::boolean(op == "<" ? cmp < 0 : op == ">" ? cmp > 0 : op == "<=" ? cmp <= 0 : cmp >= 0);
  }
  if (l.is_undefined()) undefined_error(l, e.line);
  if (r.is_undefined()) undefined_error(r, e.line);
  if (op == "+") {
    if (l.is_string() && r.is_string()) {
      check_size(l.as_string().size() + r.as_string().size(), e.line);
      if (l.is_markup() == r.is_markup()) {
        return l.is_markup() ? JinjaValue::markup(l.as_string() + r.as_string())
                             : JinjaValue::string(l.as_string() + r.as_string());
      }
      // Markup + str escapes the str (Markup.__add__ / __radd__).
      std::string s = (l.is_markup() ? l.as_string() : escape_html(l.as_string())) +
                      (r.is_markup() ? r.as_string() : escape_html(r.as_string()));
      check_size(s.size(), e.line);
      return JinjaValue::markup(std::move(s));
    }
    if (l.is_list() && r.is_list()) {
      count_iterations(static_cast<int64_t>(r.items().size()), e.line);
      JinjaList items = l.items();
      items.insert(items.end(), r.items().begin(), r.items().end());
      return JinjaValue::list(std::move(items));
    }
  }
  if (op == "*" && (l.is_string() || l.is_list()) && r.is_number() && r.kind() != JinjaValue::Kind::kFloat) {
    const int64_t times = std::max<int64_t>(0, r.as_int());
    if (l.is_string()) {
      check_size(static_cast<size_t>(std::min<int64_t>(times, int64_t{1} << 40)) * l.as_string().size(), e.line);
      std::string s;
      for (int64_t i = 0; i < times; ++i) s += l.as_string();
      return JinjaValue::string(s);
    }
    count_iterations(times * static_cast<int64_t>(std::min<size_t>(l.items().size(), 1u << 20)), e.line);
    JinjaList items;
    for (int64_t i = 0; i < times; ++i) items.insert(items.end(), l.items().begin(), l.items().end());
    return JinjaValue::list(std::move(items));
  }
  if (!l.is_number() || !r.is_number())
    fail(e.line, std::string("unsupported operand type(s) for ") + op + ": '" + l.type_name() + "' and '" +
                     r.type_name() + "'");
  const bool real = l.kind() == JinjaValue::Kind::kFloat || r.kind() == JinjaValue::Kind::kFloat;
  if (op == "/") {
    if (r.as_double() == 0) fail(e.line, "division by zero");
    return JinjaValue::number(l.as_double() / r.as_double());
  }
  if ((op == "//" || op == "%") && r.as_double() == 0) fail(e.line, "division by zero");
  if (real || (op == "**" && r.as_int() < 0)) {
    const double a = l.as_double(), b = r.as_double();
    if (op == "+") return JinjaValue::number(a + b);
    if (op == "-") return JinjaValue::number(a - b);
    if (op == "*") return JinjaValue::number(a * b);
    if (op == "//") return JinjaValue::number(std::floor(a / b));
    if (op == "%") return JinjaValue::number(a - b * std::floor(a / b));
    if (op == "**") return JinjaValue::number(std::pow(a, b));
  } else {
    // Python's integers are unbounded, ours are 64-bit: a result that does not
    // fit is an error, not undefined behaviour or a silent wrap.
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
      int64_t base = a;  // by squaring, each product checked
      v = 1;
      for (int64_t ex = b; ex != 0; ex >>= 1) {
        if ((ex & 1) && __builtin_mul_overflow(v, base, &v)) fits(true);
        if ((ex >> 1) != 0 && __builtin_mul_overflow(base, base, &base)) fits(true);
      }
      return fits(false);
    }
  }
  unsupported(e.line, "the operator '" + op + "'");
}

}  // namespace sluice::jinja
