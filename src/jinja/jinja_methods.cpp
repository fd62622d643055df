// Methods of str, dict and list values in the Jinja renderer, as Python
// defines them (`'a,b'.split(',')`, `d.items()`, `ns.items.append(x)`).
#include <algorithm>
#include <string_view>

#include "jinja/jinja_render.h"

namespace sluice::jinja {
namespace {

// Python's str.title(): a letter after a non-letter starts a word.
std::string py_title(const std::string& s, bool capitalize_only) {
  std::string r = s;
  bool start = true;
  for (size_t i = 0; i < r.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(r[i]);
    const bool alpha = std::isalpha(c) != 0;
    const bool up = capitalize_only ? i == 0 : start;
    r[i] = static_cast<char>(up ? std::toupper(c) : std::tolower(c));
    start = !alpha;
  }
  return r;
}

// str.split / str.rsplit, with Python's whitespace rule when sep is absent.
JinjaList split(const std::string& s, const JinjaValue& sep, int64_t maxsplit, bool from_right, int line) {
  std::vector<std::string> parts;
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end)
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && kWhitespace.find(s[i]) != std::string::npos) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && kWhitespace.find(s[j]) == std::string::npos) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    const size_t n = words.size();
    const size_t splits = maxsplit < 0 ? n : std::min<size_t>(n, static_cast<size_t>(maxsplit) + 1);
    if (splits == 0) return {};
    if (!from_right) {
      for (size_t w = 0; w + 1 < splits; ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
      parts.push_back(strip_chars(s.substr(words[splits - 1].first), kWhitespace, false, true));
    } else {
      const size_t first_whole = n - splits + 1;
      parts.push_back(s.substr(0, words[first_whole - 1].second));  // leading whitespace kept, as Python does
      for (size_t w = first_whole; w < n; ++w) parts.push_back(s.substr(words[w].first, words[w].second - words[w].first));
    }
  } else {
    const std::string& d = sep.as_string();
    if (d.empty()) fail(line, "empty separator");
    // rsplit is split of the reversed text at the reversed separator, read back.
    const std::string text = from_right ? std::string(s.rbegin(), s.rend()) : s;
    const std::string delim = from_right ? std::string(d.rbegin(), d.rend()) : d;
    size_t i = 0, j;
    while (maxsplit != 0 && (j = find_text(text, delim, i)) != std::string::npos) {
      parts.push_back(text.substr(i, j - i));
      i = j + delim.size();
      --maxsplit;
    }
    parts.push_back(text.substr(i));
    if (from_right) {
      for (std::string& p : parts) std::reverse(p.begin(), p.end());
      std::reverse(parts.begin(), parts.end());
    }
  }
  JinjaList out;
  for (auto& p : parts) out.push_back(JinjaValue::string(std::move(p)));
  return out;
}

// str.format with {} / {0} / {name} fields ({{ and }} are braces; format specs are ignored).
std::string format(const std::string& fmt, const JinjaArgs& a, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail(line, "format(): single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    field = field.substr(0, field.find_first_of(":!"));
    JinjaValue v;
    if (field.empty()) v = a.get(auto_index++, "");
    else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = a.get(std::stoul(field), "");
    else v = a.get(SIZE_MAX, field);
    if (v.is_undefined()) fail(line, "format(): no argument for {" + field + "}");
    out += v.to_output();
    i = close;
  }
  return out;
}

}  // namespace

JinjaValue Renderer::call_method(const JinjaValue& obj, const std::string& name, JinjaArgs& a, int line) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const JinjaValue chars_arg = a.get(0, "chars");
    const std::string chars = chars_arg.is_string() ? chars_arg.as_string() : kWhitespace;
    if (name == "strip") return JinjaValue::string(strip_chars(s, chars, true, true));
    if (name == "lstrip") return JinjaValue::string(strip_chars(s, chars, true, false));
    if (name == "rstrip") return JinjaValue::string(strip_chars(s, chars, false, true));
    if (name == "upper" || name == "lower") return JinjaValue::string(ascii_case(s, name == "upper"));
    if (name == "title") return JinjaValue::string(py_title(s, false));
    if (name == "capitalize") return JinjaValue::string(py_title(s, true));
    if (name == "startswith" || name == "endswith") {
      const JinjaValue arg = a.get(0, "prefix");
      std::vector<std::string> options;
      if (arg.is_list()) {
        for (const auto& o : arg.items()) options.push_back(o.to_output());
      } else if (arg.is_string()) {
        options.push_back(arg.as_string());
      } else {
        fail(line, std::string(name) + "() needs a str or a tuple of str, not " + arg.type_name());
      }
      for (const auto& o : options) {
        if (name == "startswith" ? s.compare(0, o.size(), o) == 0
                                 : s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)
          return JinjaValue::boolean(true);
      }
      return JinjaValue::boolean(false);
    }
    if (name == "split" || name == "rsplit") {
      const JinjaValue maxsplit = a.get(1, "maxsplit");
      JinjaList parts = split(s, a.get(0, "sep"), maxsplit.is_number() ? maxsplit.as_int() : -1, name == "rsplit", line);
      count_iterations(static_cast<int64_t>(parts.size()), line);
      return JinjaValue::list(std::move(parts));
    }
    if (name == "splitlines") {
      JinjaList parts = split(s, JinjaValue::string("\n"), -1, false, line);
      if (!parts.empty() && parts.back().as_string().empty()) parts.pop_back();
      return JinjaValue::list(std::move(parts));
    }
    if (name == "replace") {
      const int64_t count = a.get(2, "count").is_number() ? a.get(2, "count").as_int() : -1;
      std::string r = replace_all(s, a.get(0, "old").to_output(), a.get(1, "new").to_output(), count);
      check_size(r.size(), line);
      return JinjaValue::string(std::move(r));
    }
    if (name == "find" || name == "rfind" || name == "index") {
      const std::string sub = a.get(0, "sub").to_output();
      size_t p = std::string::npos;
      if (name != "rfind") {
        p = find_text(s, sub);
      } else {  // the first match in the reversed text is the last one
        p = find_text(std::string(s.rbegin(), s.rend()), std::string(sub.rbegin(), sub.rend()));
        if (p != std::string::npos) p = s.size() - p - sub.size();
      }
      if (p == std::string::npos && name == "index") fail(line, "substring not found");
      // Python counts characters, not bytes.
      return JinjaValue::integer(p == std::string::npos ? -1 : static_cast<int64_t>(utf8_chars(s.substr(0, p)).size()));
    }
    if (name == "count") {
      const std::string sub = a.get(0, "sub").to_output();
      if (sub.empty()) return JinjaValue::integer(static_cast<int64_t>(utf8_chars(s).size()) + 1);
      int64_t n = 0;
      for (size_t p = find_text(s, sub); p != std::string::npos; p = find_text(s, sub, p + sub.size())) ++n;
      return JinjaValue::integer(n);
    }
    if (name == "join") {
      std::string r;
      JinjaList items = iterate(a.get(0, "iterable"), line);
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          fail(line, "sequence item " + std::to_string(i) + ": expected str instance, " + items[i].type_name() + " found");
        r += (i ? s : "") + items[i].as_string();
        check_size(r.size(), line);
      }
      return JinjaValue::string(r);
    }
    if (name == "format") {
      std::string r = format(s, a, line);
      check_size(r.size(), line);
      return JinjaValue::string(std::move(r));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
      if (s.empty()) return JinjaValue::boolean(false);
      for (char c : s) {
        const unsigned char u = static_cast<unsigned char>(c);
        const bool ok = name == "isdigit" ? std::isdigit(u) : name == "isalpha" ? std::isalpha(u)
                      : name == "isalnum" ? std::isalnum(u) : std::isspace(u);
        if (!ok) return JinjaValue::boolean(false);
      }
      return JinjaValue::boolean(true);
    }
  } else if (obj.is_dict()) {
    if (name == "items") {
      JinjaList pairs;
      for (const auto& [k, v] : obj.entries()) pairs.push_back(JinjaValue::tuple({k, v}));
      return JinjaValue::list(std::move(pairs));
    }
    if (name == "keys" || name == "values") {
      JinjaList r;
      for (const auto& [k, v] : obj.entries()) r.push_back(name == "keys" ? k : v);
      return JinjaValue::list(std::move(r));
    }
    if (name == "get") {
      const JinjaValue key = a.get(0, "key");
      if (!key.hashable()) fail(line, std::string("unhashable type: '") + key.type_name() + "'");
      if (const JinjaValue* v = obj.find(key)) return *v;
      return a.positional.size() > 1 ? a.positional[1] : a.get(SIZE_MAX, "default").is_undefined() ? JinjaValue::none() : a.get(SIZE_MAX, "default");
    }
  } else if (obj.is_list()) {
    const bool tuple = std::string_view(obj.type_name()) == "tuple";  // immutable
    if (name == "append" && !tuple) {
      count_iterations(1, line);
      const JinjaValue x = a.get(0, "object");
      check_acyclic(obj, x, line);
      obj.items().push_back(x);
      return JinjaValue::none();
    }
    if (name == "extend" && !tuple) {
      JinjaList more = iterate(a.get(0, "iterable"), line);
      count_iterations(static_cast<int64_t>(more.size()), line);
      for (const JinjaValue& x : more) check_acyclic(obj, x, line);
      obj.items().insert(obj.items().end(), more.begin(), more.end());
      return JinjaValue::none();
    }
    if (name == "index" || name == "count") {
      const JinjaValue x = a.get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < obj.items().size(); ++i) {
        if (!obj.items()[i].equals(x)) continue;
        if (name == "index") return JinjaValue::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") fail(line, x.repr() + " is not in list");
      return JinjaValue::integer(n);
    }
  }
  if (obj.is_none()) fail(line, "'NoneType' object has no attribute '" + name + "'");
  unsupported(line, std::string("the method '") + obj.type_name() + "." + name + "()'");
}

}  // namespace sluice::jinja
