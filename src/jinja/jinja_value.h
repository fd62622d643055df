// JinjaValue: the dynamic value of the chat-template renderer (jinja.h).
//
// Python semantics where chat templates depend on them: bool is a number
// (`0 == false`), `+` concatenates strings and lists, truthiness of "" / [] / {}
// is false, and an undefined value renders as "" but fails when indexed; an
// undefined value remembers why it is undefined ("'x' is undefined", "'dict
// object' has no attribute 'y'"), which is the message when it is misused.
// Dict keys keep their Python type (str, int, float, bool, None, tuple) and
// Python's key equality: 1, 1.0 and True are one key, '1' another.
// Lists and dicts are shared (a copy of a Value aliases the same container),
// which is what makes `namespace()` attribute assignment visible across loop
// scopes. The renderer never lets a container contain itself (no cycles), and a
// value nested deeper than kMaxRenderDepth cannot be printed or compared (the
// render fails); dropping a deeply nested value does not recurse. Values are
// not thread-safe; each render builds its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sluice::jinja {

class JinjaValue;
using JinjaList = std::vector<JinjaValue>;
// Insertion-ordered, as Python dicts are: (key, value) pairs, no two keys equal.
using JinjaDict = std::vector<std::pair<JinjaValue, JinjaValue>>;
struct JinjaArgs;
using JinjaFunction = std::function<JinjaValue(JinjaArgs& args)>;

class JinjaValue {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  JinjaValue() = default;  // undefined
  JinjaValue(const JinjaValue&) = default;
  JinjaValue(JinjaValue&&) noexcept = default;
  JinjaValue& operator=(const JinjaValue&) = default;
  JinjaValue& operator=(JinjaValue&&) noexcept = default;
  // Releases nested containers with a loop, not a recursion per level.
  ~JinjaValue();
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
  // The list or dict this value shares (its identity), or nullptr.
  const void* container() const {
    return kind_ == Kind::kList ? static_cast<const void*>(list_.get())
         : kind_ == Kind::kDict ? static_cast<const void*>(dict_.get()) : nullptr;
  }

  // Python truthiness.
  bool truthy() const;
  // Dict lookup by Python key equality; undefined (with jinja2's hint) if
  // absent, if the key is unhashable, or if this is not a dict.
  JinjaValue get(const JinjaValue& key) const;
  JinjaValue get(const std::string& key) const;  // a str key
  // The value under `key` in a dict, or nullptr.
  const JinjaValue* find(const JinjaValue& key) const;
  // Inserts or replaces a dict entry; a replaced entry keeps its key, as in
  // Python ({1: 'a', True: 'b'} is {1: 'b'}). The key must be hashable.
  void set(const JinjaValue& key, JinjaValue v) const;
  void set(const std::string& key, JinjaValue v) const;  // a str key
  // Python's hash() would accept it: not a list, dict or function; a tuple
  // whose items are all hashable.
  bool hashable() const;
  // How `{{ v }}` prints it: Python str() (True, None, 1.5, ['a', 1]); undefined -> "".
  // Fails the render (JinjaError) past kMaxOutputBytes or kMaxRenderDepth.
  std::string to_output() const;
  // Python repr(): strings quoted; used inside lists and dicts. Fails as to_output.
  std::string repr() const;
  // Python ==, with bool/int/float compared as numbers; a container equals
  // itself (Python's identity shortcut). Fails past kMaxRenderDepth.
  bool equals(const JinjaValue& other) const;
  // Python type name, for error messages ("tuple" for a tuple).
  const char* type_name() const;

 private:
  void repr_into(std::string* out, int depth) const;
  bool equals_at(const JinjaValue& other, int depth) const;
  bool hashable_at(int depth) const;
  // A value of `kind` whose payload `member` is `payload`; boxed(): held in a
  // new shared T.
  template <class M>
  static JinjaValue of_kind(Kind kind, M JinjaValue::*member, M payload);
  template <class T>
  static JinjaValue boxed(Kind kind, std::shared_ptr<T> JinjaValue::*member, T payload);

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

}  // namespace sluice::jinja
