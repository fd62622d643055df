// Tests of the Jinja renderer (`value is name(args)`), as jinja2 defines them.
#include <set>

#include "jinja/jinja_render.h"

namespace sluice::jinja {
namespace {

const std::set<std::string>& known_tests() {
  static const std::set<std::string> k = {
      "defined", "undefined", "none",  "string",   "number",   "integer", "float", "mapping", "iterable",
      "sequence", "boolean",  "true",  "false",    "callable", "odd",     "even",  "equalto", "eq",
      "==",      "ne",        "!=",    "divisibleby", "in",    "sameas",  "lower", "upper", "gt",
      "ge",      "lt",        "le",    "greaterthan", "lessthan", "escaped", "filter", "test"};
  return k;
}

}  // namespace

bool is_known_test(const std::string& name) { return known_tests().count(name) != 0; }

bool Renderer::apply_test(const std::string& t, const JinjaValue& v, JinjaArgs& a, int line) {
  using K = JinjaValue::Kind;
  const JinjaValue other = a.get(0, "other");
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
  if (t == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (t == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (t == "callable") return v.is_function();
  if (t == "escaped") return false;
  if (t == "lower" || t == "upper") {  // Python's str.islower() / isupper() on ASCII letters
    if (!v.is_string()) return false;
    bool cased = false;
    for (char c : v.as_string()) {
      const bool up = c >= 'A' && c <= 'Z', low = c >= 'a' && c <= 'z';
      if ((t == "lower" && up) || (t == "upper" && low)) return false;
      cased = cased || up || low;
    }
    return cased;
  }
  if (t == "odd" || t == "even") {
    if (!v.is_number()) fail(line, std::string("'") + v.type_name() + "' is not an integer");
    return ((v.as_int() % 2) != 0) == (t == "odd");
  }
  if (t == "divisibleby") {
    const int64_t d = a.get(0, "num").as_int();
    if (d == 0) fail(line, "divisibleby 0");
    return v.as_int() % d == 0;
  }
  if (t == "equalto" || t == "eq" || t == "==") return v.equals(other);
  if (t == "ne" || t == "!=") return !v.equals(other);
  if (t == "sameas") return v.kind() == other.kind() && v.equals(other);  // identity, for the values templates pass
  if (t == "gt" || t == "greaterthan") return compare_values(v, other, line) > 0;
  if (t == "ge") return compare_values(v, other, line) >= 0;
  if (t == "lt" || t == "lessthan") return compare_values(v, other, line) < 0;
  if (t == "le") return compare_values(v, other, line) <= 0;
  if (t == "in") {
    const JinjaValue seq = a.get(0, "seq");
    if (seq.is_string()) return v.is_string() && find_text(seq.as_string(), v.as_string()) != std::string::npos;
    if (seq.is_dict()) {
      if (!v.hashable()) fail(line, std::string("unhashable type: '") + v.type_name() + "'");
      return seq.find(v) != nullptr;
    }
    for (const JinjaValue& x : iterate(seq, line))
      if (x.equals(v)) return true;
    return false;
  }
  if (t == "filter") return v.is_string() && is_known_filter(v.as_string());
  if (t == "test") return v.is_string() && is_known_test(v.as_string());
  unsupported(line, "the test '" + t + "'");
}

}  // namespace sluice::jinja
