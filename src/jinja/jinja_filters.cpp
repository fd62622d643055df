// Filters of the Jinja renderer (`value | name(args)`), as jinja2 3.1 and
// Hugging Face's tojson define them. Each takes its arguments positionally or
// by jinja2's keyword names.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "jinja/jinja_limits.h"
#include "jinja/jinja_render.h"

namespace sluice::jinja {
namespace {

const std::set<std::string>& known_filters() {
  static const std::set<std::string> k = {
      "abs",    "attr",   "batch", "capitalize", "count",  "d",         "default", "dictsort", "e",
      "escape", "first",  "float", "indent",     "int",    "items",     "join",    "last",     "length",
      "list",   "lower",  "map",   "max",        "min",    "reject",    "rejectattr", "replace", "reverse",
      "round",  "safe",   "select", "selectattr", "sort",  "string",    "sum",     "title",    "tojson",
      "trim",   "unique", "upper", "wordcount"};
  return k;
}

// `s` read whole as a number (std::stod's syntax), or nullopt when it is not
// one or has more after it.
std::optional<double> whole_double(const std::string& s) {
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (...) {
  }
  return std::nullopt;
}

// First character upper, the rest lower (jinja2's capitalize).
std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  return ascii_case(s.substr(0, 1), true) + ascii_case(s.substr(1), false);
}

// jinja2's title: words begin after runs of '-', whitespace, '(', '{', '[', '<'.
std::string title(const std::string& s) {
  auto sep = [](char c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || kWhitespace.find(c) != std::string::npos; };
  std::string out;
  bool start = true;
  for (char c : s) {
    if (sep(c)) {
      out += c;
      start = true;
    } else {
      out += start ? ascii_case(std::string(1, c), true) : ascii_case(std::string(1, c), false);
      start = false;
    }
  }
  return out;
}

// A dict key as json.dumps writes it: str as is, 1.5 as "1.5", True as "true",
// None as "null"; a tuple key is a TypeError.
std::string json_key(const JinjaValue& k, int line) {
  switch (k.kind()) {
    case JinjaValue::Kind::kString: return k.as_string();
    case JinjaValue::Kind::kNone: return "null";
    case JinjaValue::Kind::kBool: return k.as_bool() ? "true" : "false";
    case JinjaValue::Kind::kInt: return k.repr();
    case JinjaValue::Kind::kFloat: {
      const double d = k.as_double();
      return std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : k.repr();
    }
    default: fail(line, std::string("keys must be str, int, float, bool or None, not ") + k.type_name());
  }
}

void dump_json(const JinjaValue& v, int indent, bool sort_keys, int depth, int line, std::string* out) {
  if (depth > kMaxParseDepth) over_limit(line, "tojson of a value nested too deep");
  // A list holding one long string many times over is small, its JSON is not.
  if (out->size() > kMaxOutputBytes)
    over_limit(line, "output larger than " + std::to_string(kMaxOutputBytes) + " bytes (limit kMaxOutputBytes)");
  const int64_t pad = indent >= 0 ? int64_t{indent} * (depth + 1) : 0;
  if (pad > static_cast<int64_t>(kMaxOutputBytes))
    over_limit(line, "output larger than " + std::to_string(kMaxOutputBytes) + " bytes (limit kMaxOutputBytes)");
  std::string nl, nl_end;  // the line breaks before an item and before the closing bracket
  if (indent >= 0) {
    nl.assign(1, '\n').append(static_cast<size_t>(pad), ' ');
    nl_end.assign(1, '\n').append(static_cast<size_t>(pad - indent), ' ');
  }
  const char* item_sep = indent >= 0 ? "," : ", ";
  auto quoted = [](const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  switch (v.kind()) {
    case JinjaValue::Kind::kUndefined: fail(line, v.undefined_hint().empty() ? "tojson of an undefined value" : v.undefined_hint());
    case JinjaValue::Kind::kFunction: fail(line, "Object of type function is not JSON serializable");
    case JinjaValue::Kind::kNone: *out += "null"; return;
    case JinjaValue::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case JinjaValue::Kind::kInt: *out += v.repr(); return;
    case JinjaValue::Kind::kFloat: {
      const double d = v.as_double();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : v.repr();
      return;
    }
    case JinjaValue::Kind::kString: *out += quoted(v.as_string()); return;
    case JinjaValue::Kind::kList: {
      if (v.items().empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      bool first = true;
      for (const auto& e : v.items()) {
        *out += first ? "" : item_sep;
        *out += nl;
        dump_json(e, indent, sort_keys, depth + 1, line, out);
        first = false;
      }
      *out += nl_end + "]";
      return;
    }
    case JinjaValue::Kind::kDict: {
      if (v.entries().empty()) {
        *out += "{}";
        return;
      }
      JinjaList entries;  // (key, value) tuples; json.dumps sorts them as Python sorts tuples
      for (const auto& [k, e] : v.entries()) entries.push_back(JinjaValue::tuple({k, e}));
      if (sort_keys) {
        JinjaList keys;
        for (const auto& [k, e] : v.entries()) keys.push_back(k);
        py_sort(entries, std::move(keys), false, line);
      }
      *out += "{";
      bool first = true;
      for (const JinjaValue& entry : entries) {
        *out += first ? "" : item_sep;
        *out += nl + quoted(json_key(entry.items()[0], line)) + ": ";
        dump_json(entry.items()[1], indent, sort_keys, depth + 1, line, out);
        first = false;
      }
      *out += nl_end + "}";
      return;
    }
  }
}

// jinja2's attribute paths for map/selectattr/sort/...: "a.b.0".
JinjaValue get_path(const JinjaValue& v, const std::string& path) {
  JinjaValue cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!part.empty() && part.size() < 19 && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const JinjaValue i = JinjaValue::integer(std::stoll(part));  // jinja2 looks "0" up as the int 0
      if (cur.is_list()) {
        const size_t k = static_cast<size_t>(i.as_int());
        cur = k < cur.items().size() ? cur.items()[k] : JinjaValue::undefined("list index " + part + " out of range");
      } else {
        cur = cur.get(i);
      }
    } else {
      cur = cur.get(part);
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

// Arguments after the first `skip` positional ones, for map/select's filter or test.
JinjaArgs rest(const JinjaArgs& a, size_t skip) {
  JinjaArgs r;
  for (size_t i = skip; i < a.positional.size(); ++i) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

}  // namespace

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

std::string indent_text(std::string s, const std::string& pad, bool first, bool blank) {
  s += "\n";  // as jinja2 does, so that a trailing newline keeps its (unindented) empty line
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(b, i - b));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < s.size()) lines.push_back(s.substr(b));
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  return first ? pad + out : out;
}

}  // namespace

bool is_known_filter(const std::string& name) { return known_filters().count(name) != 0; }

std::string to_json_text(const JinjaValue& v, int indent, bool sort_keys, int line) {
  std::string out;
  dump_json(v, indent, sort_keys, 0, line, &out);
  return out;
}

JinjaValue Renderer::apply_filter(const std::string& f, const JinjaValue& v, JinjaArgs& a, int line) {
  using K = JinjaValue::Kind;
  auto sequence = [&] {
    JinjaList items = iterate(v, line);
    count_iterations(static_cast<int64_t>(items.size()), line);
    return items;
  };
  // Python's key for sorting and comparing: lowercased strings unless case_sensitive.
  auto sort_key = [&](const JinjaValue& x, bool case_sensitive, const JinjaValue& attribute) {
    JinjaValue k = attribute.is_undefined() || attribute.is_none() ? x : get_path(x, attribute.to_output());
    return !case_sensitive && k.is_string() ? JinjaValue::string(ascii_case(k.as_string(), false)) : k;
  };
  if (f == "default" || f == "d") {
    const JinjaValue dflt = a.get(0, "default_value");
    if (v.is_undefined() || (a.get(1, "boolean").truthy() && !v.truthy())) return dflt.is_undefined() ? JinjaValue::string("") : dflt;
    return v;
  }
  if (f == "safe") return v.is_markup() ? v : JinjaValue::markup(v.to_output());
  if (f == "string") return JinjaValue::string(v.to_output());
  if (f == "tojson") {
    // HF's signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    const JinjaValue indent = a.get(1, "indent");
    return JinjaValue::string(
        to_json_text(v,
                     indent.is_number()  // a negative indent breaks lines without spaces, as in Python
                         ? static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, int64_t{kMaxOutputBytes} + 1))
                         : -1,
                     a.get(3, "sort_keys").truthy(), line));
  }
  if (f == "length" || f == "count") {
    if (v.is_string()) return JinjaValue::integer(static_cast<int64_t>(utf8_chars(v.as_string()).size()));
    if (v.is_list()) return JinjaValue::integer(static_cast<int64_t>(v.items().size()));
    if (v.is_dict()) return JinjaValue::integer(static_cast<int64_t>(v.entries().size()));
    if (v.is_undefined()) return JinjaValue::integer(0);
    fail(line, std::string("object of type '") + v.type_name() + "' has no len()");
  }
  if (f == "list") return JinjaValue::list(sequence());
  if (f == "first" || f == "last") {
    JinjaList items = iterate(v, line);
    if (items.empty()) return JinjaValue::undefined("No " + f + " item, sequence was empty.");
    return f == "first" ? items.front() : items.back();
  }
  if (f == "reverse") {
    if (v.is_string()) {
      auto chars = utf8_chars(v.as_string());
      std::string r;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) r += *it;
      return JinjaValue::string(r);
    }
    JinjaList items = sequence();
    std::reverse(items.begin(), items.end());
    return JinjaValue::list(std::move(items));
  }
  if (f == "join") {
    const JinjaValue sep = a.get(0, "d"), attribute = a.get(1, "attribute");
    std::string r;
    JinjaList items = sequence();
    for (size_t i = 0; i < items.size(); ++i) {
      r += (i && !sep.is_undefined() ? sep.to_output() : "") +
           (attribute.is_undefined() ? items[i] : get_path(items[i], attribute.to_output())).to_output();
      check_size(r.size(), line);
    }
    return JinjaValue::string(r);
  }
  if (f == "items" || f == "dictsort") {
    if (v.is_undefined()) return JinjaValue::list();
    if (!v.is_dict()) fail(line, std::string("can only apply '") + f + "' to a mapping, not '" + v.type_name() + "'");
    JinjaList pairs;
    for (const auto& [k, e] : v.entries()) pairs.push_back(JinjaValue::tuple({k, e}));
    count_iterations(static_cast<int64_t>(pairs.size()), line);
    if (f == "dictsort") {
      const bool cs = a.get(0, "case_sensitive").truthy();
      const JinjaValue by = a.get(1, "by");
      if (!by.is_undefined() && by.to_output() != "key" && by.to_output() != "value")
        fail(line, "You can only sort by either \"key\" or \"value\"");
      const size_t pos = by.to_output() == "value" ? 1 : 0;
      JinjaList keys;
      for (const JinjaValue& p : pairs) keys.push_back(sort_key(p.items()[pos], cs, JinjaValue()));
      py_sort(pairs, std::move(keys), a.get(2, "reverse").truthy(), line);
    }
    return JinjaValue::list(std::move(pairs));
  }
  if (f == "attr") return v.get(a.get(0, "name"));
  if ((f == "map" || f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") && !v.truthy())
    return JinjaValue::list();  // jinja2 yields nothing for a falsy sequence, None included
  if (f == "map") {
    JinjaList out;
    const JinjaValue attribute = a.get(99, "attribute");
    for (const JinjaValue& x : sequence()) {
      if (!attribute.is_undefined()) {
        JinjaValue r = get_path(x, attribute.to_output());
        if (r.is_undefined() && !a.get(99, "default").is_undefined()) r = a.get(99, "default");
        out.push_back(r);
      } else {
        if (a.positional.empty()) fail(line, "map() needs a filter name or attribute=");
        JinjaArgs fa = rest(a, 1);
        const std::string name = a.positional[0].to_output();
        if (!is_known_filter(name)) unsupported(line, "the filter '" + name + "'");
        out.push_back(apply_filter(name, x, fa, line));
      }
    }
    return JinjaValue::list(std::move(out));
  }
  if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
    const bool attr = f == "selectattr" || f == "rejectattr";
    const bool want = f == "select" || f == "selectattr";
    const size_t first = attr ? 1 : 0;  // the test name's position
    if (attr && a.positional.empty()) fail(line, f + "() needs an attribute name");
    JinjaList out;
    for (const JinjaValue& x : sequence()) {
      const JinjaValue subject = attr ? get_path(x, a.positional[0].to_output()) : x;
      bool ok;
      if (a.positional.size() > first) {
        const std::string test = a.positional[first].to_output();
        if (!is_known_test(test)) unsupported(line, "the test '" + test + "'");
        JinjaArgs ta = rest(a, first + 1);
        ok = apply_test(test, subject, ta, line);
      } else {
        ok = subject.truthy();
      }
      if (ok == want) out.push_back(x);
    }
    return JinjaValue::list(std::move(out));
  }
  if (f == "unique") {
    const bool cs = a.get(0, "case_sensitive").truthy();
    const JinjaValue attribute = a.get(1, "attribute");
    JinjaList out, keys;
    for (const JinjaValue& x : sequence()) {
      check_deadline(line);  // quadratic in the items
      const JinjaValue k = sort_key(x, cs, attribute);
      if (std::none_of(keys.begin(), keys.end(), [&](const JinjaValue& y) { return y.equals(k); })) {
        keys.push_back(k);
        out.push_back(x);
      }
    }
    return JinjaValue::list(std::move(out));
  }
  if (f == "sort") {
    const bool reverse = a.get(0, "reverse").truthy(), cs = a.get(1, "case_sensitive").truthy();
    const JinjaValue attribute = a.get(2, "attribute");
    JinjaList items = sequence();
    JinjaList keys;
    for (const JinjaValue& x : items) keys.push_back(sort_key(x, cs, attribute));
    py_sort(items, std::move(keys), reverse, line);
    return JinjaValue::list(std::move(items));
  }
  if (f == "min" || f == "max") {
    const bool cs = a.get(0, "case_sensitive").truthy();
    const JinjaValue attribute = a.get(1, "attribute");
    JinjaList items = sequence();
    if (items.empty()) return JinjaValue::undefined("No aggregated item, sequence was empty.");
    JinjaValue best = items[0];
    for (const JinjaValue& x : items) {
      const int c = compare_values(sort_key(x, cs, attribute), sort_key(best, cs, attribute), line);
      if (f == "min" ? c < 0 : c > 0) best = x;
    }
    return best;
  }
  if (f == "sum") {
    const JinjaValue attribute = a.get(0, "attribute");
    const JinjaValue start = a.get(1, "start");
    bool real = start.kind() == K::kFloat;
    double d = start.is_number() ? start.as_double() : 0;
    int64_t i = start.is_number() ? start.as_int() : 0;
    for (const JinjaValue& x : sequence()) {
      const JinjaValue n = attribute.is_undefined() ? x : get_path(x, attribute.to_output());
      if (!n.is_number()) fail(line, std::string("unsupported operand type(s) for +: 'int' and '") + n.type_name() + "'");
      real = real || n.kind() == K::kFloat;
      d += n.as_double();
      i += n.as_int();
    }
    return real ? JinjaValue::number(d) : JinjaValue::integer(i);
  }
  if (f == "batch") {
    const int64_t size = a.get(0, "linecount").as_int();
    if (size <= 0) fail(line, "batch() needs a positive size");
    const JinjaValue fill = a.get(1, "fill_with");
    JinjaList out, cur;
    for (const JinjaValue& x : sequence()) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == size) out.push_back(JinjaValue::list(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
      if (!fill.is_undefined() && !fill.is_none())
        while (static_cast<int64_t>(cur.size()) < size) cur.push_back(fill);
      out.push_back(JinjaValue::list(std::move(cur)));
    }
    return JinjaValue::list(std::move(out));
  }
  if (f == "int") {
    const JinjaValue dflt = a.get(0, "default");
    const JinjaValue fallback = dflt.is_undefined() ? JinjaValue::integer(0) : dflt;
    if (v.is_string()) {
      const std::string s = strip_chars(v.as_string(), kWhitespace, true, true);
      try {
        size_t used = 0;
        const int64_t base = a.get(1, "base").is_number() ? a.get(1, "base").as_int() : 10;
        const int64_t r = std::stoll(s, &used, static_cast<int>(base));
        if (used == s.size()) return JinjaValue::integer(r);
      } catch (...) {
        return fallback;
      }
      const std::optional<double> d = whole_double(s);  // "1.5": int() of the float
      return d ? JinjaValue::integer(JinjaValue::number(*d).as_int()) : fallback;
    }
    return v.is_number() ? JinjaValue::integer(v.as_int()) : fallback;
  }
  if (f == "float") {
    const JinjaValue dflt = a.get(0, "default");
    const JinjaValue fallback = dflt.is_undefined() ? JinjaValue::number(0) : dflt;
    if (v.is_string()) {
      const std::optional<double> d = whole_double(strip_chars(v.as_string(), kWhitespace, true, true));
      return d ? JinjaValue::number(*d) : fallback;
    }
    return v.is_number() ? JinjaValue::number(v.as_double()) : fallback;
  }
  if (f == "abs") {
    if (v.kind() == K::kFloat) return JinjaValue::number(std::fabs(v.as_double()));
    if (v.is_number()) return JinjaValue::integer(std::llabs(v.as_int()));
    fail(line, std::string("bad operand type for abs(): '") + v.type_name() + "'");
  }
  if (f == "round") {
    const int64_t precision = a.get(0, "precision").is_number() ? a.get(0, "precision").as_int() : 0;
    const std::string method = a.get(1, "method").is_string() ? a.get(1, "method").as_string() : "common";
    const double scale = std::pow(10.0, static_cast<double>(precision)), x = v.as_double() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
    if (method == "common" && std::fabs(x - std::trunc(x)) != 0.5) r = std::round(x);
    return JinjaValue::number(r / scale);
  }
  // The rest work on the value's text (an undefined value's text is "").
  const std::string s = v.to_output();
  if (f == "trim") {
    const JinjaValue chars = a.get(0, "chars");
    return JinjaValue::string(strip_chars(s, chars.is_string() ? chars.as_string() : kWhitespace, true, true));
  }
  if (f == "upper" || f == "lower") return JinjaValue::string(ascii_case(s, f == "upper"));
  if (f == "capitalize") return JinjaValue::string(capitalize(s));
  if (f == "title") return JinjaValue::string(title(s));
  if (f == "e" || f == "escape") return v.is_markup() ? v : JinjaValue::markup(escape_html(s));
  if (f == "replace") {
    const int64_t count = a.get(2, "count").is_number() ? a.get(2, "count").as_int() : -1;
    std::string r = replace_all(s, a.get(0, "old").to_output(), a.get(1, "new").to_output(), count);
    check_size(r.size(), line);
    return JinjaValue::string(std::move(r));
  }
  if (f == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char c : s) {
      const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return JinjaValue::integer(n);
  }
  if (f == "indent") {
    const JinjaValue width = a.get(0, "width");
    const std::string pad = width.is_string() ? width.as_string()
                                              : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                                width.is_number() ? width.as_int() : 4, 0, 1 << 16)),
                                                            ' ');
    check_size(s.size() + pad.size() * static_cast<size_t>(std::count(s.begin(), s.end(), '\n') + 1), line);
    return JinjaValue::string(indent_text(s, pad, a.get(1, "first").truthy(), a.get(2, "blank").truthy()));
  }
  unsupported(line, "the filter '" + f + "'");
}

}  // namespace sluice::jinja
