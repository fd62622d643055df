// JinjaValue: the dynamic value of the chat-template renderer (jinja.h).
//
// Python semantics where chat templates depend on them: bool is a number
// (`0 == false`), `+` concatenates strings and lists, truthiness of "" / [] / {}
// is false, and an undefined value renders as "" but fails when indexed; an
// undefined value remembers why it is undefined ("'x' is undefined", "'dict
// object' has no attribute 'y'"), which is the message when it is misused.
// Lists and dicts are shared (a copy of a Value aliases the same container),
// which is what makes `namespace()` attribute assignment visible across loop
// scopes. Values are not thread-safe; each render builds its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::server {

class JinjaValue;
using JinjaList = std::vector<JinjaValue>;
// Insertion-ordered, as Python dicts are.
using JinjaDict = std::vector<std::pair<std::string, JinjaValue>>;
struct JinjaArgs;
using JinjaFunction = std::function<JinjaValue(JinjaArgs& args)>;

class JinjaValue {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  JinjaValue() = default;  // undefined
  static JinjaValue undefined(std::string hint);
  static JinjaValue none();
  static JinjaValue boolean(bool b);
  static JinjaValue integer(int64_t i);
  static JinjaValue number(double d);
  static JinjaValue string(std::string s);
  // A string marked safe (jinja2's Markup, made by `| safe` and `| escape`): `+`
  // with a plain string HTML-escapes the plain side, as Markup.__add__ does.
  static JinjaValue markup(std::string s);
  static JinjaValue list(JinjaList items = {});
  // A list that prints as a Python tuple: (a, b). Otherwise a list.
  static JinjaValue tuple(JinjaList items);
  static JinjaValue dict(JinjaDict items = {});
  static JinjaValue function(JinjaFunction fn);
  // Objects keep their key order, as Python dicts from json.loads do.
  static JinjaValue from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && b_; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const;     // bool/int/float -> int
  double as_double() const;   // bool/int/float -> double
  const std::string& as_string() const { return *s_; }
  // Why an undefined value is undefined, as jinja2 words it; "" if not known.
  std::string undefined_hint() const { return kind_ == Kind::kUndefined && s_ ? *s_ : std::string(); }
  JinjaList& items() const { return *list_; }
  JinjaDict& entries() const { return *dict_; }
  const JinjaFunction& fn() const { return *fn_; }

  // Python truthiness.
  bool truthy() const;
  // Dict lookup; undefined (with jinja2's hint) if absent or not a dict.
  JinjaValue get(const std::string& key) const;
  // Inserts or replaces a dict entry.
  void set(const std::string& key, JinjaValue v) const;
  // How `{{ v }}` prints it: Python str() (True, None, 1.5, ['a', 1]); undefined -> "".
  std::string to_output() const;
  // Python repr(): strings quoted; used inside lists and dicts.
  std::string repr() const;
  // Key order kept (Python json.dumps does not sort).
  nlohmann::ordered_json to_json() const;
  // Python ==, with bool/int/float compared as numbers.
  bool equals(const JinjaValue& other) const;
  // Python type name, for error messages.
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;  // kBool: the value; kList: a tuple; kString: markup
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<JinjaList> list_;
  std::shared_ptr<JinjaDict> dict_;
  std::shared_ptr<JinjaFunction> fn_;
};

// Arguments of a call: positional, then keyword in call order.
struct JinjaArgs {
  std::vector<JinjaValue> positional;
  std::vector<std::pair<std::string, JinjaValue>> keyword;
  // Positional i, else keyword `name`, else undefined.
  JinjaValue get(size_t i, const std::string& name) const;
};

}  // namespace sluice::server
