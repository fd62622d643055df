#include "jinja/jinja_value.h"

#include <cmath>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "jinja/jinja_error.h"
#include "jinja/jinja_limits.h"

namespace sluice::jinja {

namespace {

[[noreturn]] void too_deep() {
  jinja::over_limit(0, "a value nested more than " + std::to_string(jinja::kMaxRenderDepth) +
                           " levels deep (limit kMaxRenderDepth)");
}

}  // namespace

JinjaValue::~JinjaValue() {
  // Releasing the last reference to a list in a list in a list ... would
  // recurse once per level; instead the children of every container this is
  // the last owner of are moved to a local stack and released from there.
  auto owns_children = [](const JinjaValue& v) {
    return (v.list_ && v.list_.use_count() == 1 && !v.list_->empty()) ||
           (v.dict_ && v.dict_.use_count() == 1 && !v.dict_->empty());
  };
  if (!owns_children(*this)) return;
  std::vector<JinjaValue> pending;
  auto take_children = [&pending](JinjaValue& v) {
    if (v.list_ && v.list_.use_count() == 1) {
      for (JinjaValue& e : *v.list_) pending.push_back(std::move(e));
      v.list_->clear();
    }
    if (v.dict_ && v.dict_.use_count() == 1) {
      for (auto& [k, e] : *v.dict_) {
        pending.push_back(std::move(k));
        pending.push_back(std::move(e));
      }
      v.dict_->clear();
    }
  };
  take_children(*this);
  while (!pending.empty()) {
    JinjaValue v = std::move(pending.back());
    pending.pop_back();
    if (owns_children(v)) take_children(v);
  }  // each v is released with empty containers: no recursion
}

template <class M>
JinjaValue JinjaValue::of_kind(Kind kind, M JinjaValue::*member, M payload) {
  JinjaValue v;
  v.kind_ = kind;
  v.*member = std::move(payload);
  return v;
}

template <class T>
JinjaValue JinjaValue::boxed(Kind kind, std::shared_ptr<T> JinjaValue::*member, T payload) {
  return of_kind(kind, member, std::make_shared<T>(std::move(payload)));
}

JinjaValue JinjaValue::undefined(std::string hint) { return boxed(Kind::kUndefined, &JinjaValue::s_, std::move(hint)); }

JinjaValue JinjaValue::none() {
  JinjaValue v;
  v.kind_ = Kind::kNone;
  return v;
}

JinjaValue JinjaValue::boolean(bool b) { return of_kind(Kind::kBool, &JinjaValue::b_, b); }

JinjaValue JinjaValue::integer(int64_t i) { return of_kind(Kind::kInt, &JinjaValue::i_, i); }

JinjaValue JinjaValue::number(double d) { return of_kind(Kind::kFloat, &JinjaValue::d_, d); }

JinjaValue JinjaValue::string(std::string s) { return boxed(Kind::kString, &JinjaValue::s_, std::move(s)); }

JinjaValue JinjaValue::markup(std::string s) {
  JinjaValue v = string(std::move(s));
  v.b_ = true;
  return v;
}

JinjaValue JinjaValue::list(JinjaList items) { return boxed(Kind::kList, &JinjaValue::list_, std::move(items)); }

JinjaValue JinjaValue::tuple(JinjaList items) {
  JinjaValue v = list(std::move(items));
  v.b_ = true;
  return v;
}

JinjaValue JinjaValue::dict(JinjaDict items) { return boxed(Kind::kDict, &JinjaValue::dict_, std::move(items)); }

JinjaValue JinjaValue::function(JinjaFunction fn) {
  return boxed(Kind::kFunction, &JinjaValue::fn_, std::move(fn));
}

JinjaValue JinjaValue::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      JinjaList items;
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      JinjaDict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(string(k), from_json(e));
      return dict(std::move(items));
    }
    default: return JinjaValue();
  }
}

int64_t JinjaValue::as_int() const {
  switch (kind_) {
    case Kind::kBool: return b_ ? 1 : 0;
    case Kind::kInt: return i_;
    case Kind::kFloat:  // saturating: casting a NaN or out-of-range double is undefined
      if (std::isnan(d_)) return 0;
      if (d_ >= 0x1p63) return INT64_MAX;
      if (d_ < -0x1p63) return INT64_MIN;
      return static_cast<int64_t>(d_);
    default: return 0;
  }
}

double JinjaValue::as_double() const {
  switch (kind_) {
    case Kind::kBool: return b_ ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(i_);
    case Kind::kFloat: return d_;
    default: return 0.0;
  }
}

bool JinjaValue::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kFunction: return true;
  }
  return false;
}

namespace {

// jinja2's Undefined message for a missing item: "'dict object' has no
// attribute 'x'" for a str key, "dict object has no element 1" otherwise.
JinjaValue missing(const JinjaValue& obj, const JinjaValue& key) {
  const std::string owner = std::string(obj.is_dict() ? "dict" : obj.type_name()) + " object";
  if (key.is_string()) return JinjaValue::undefined("'" + owner + "' has no attribute '" + key.as_string() + "'");
  return JinjaValue::undefined(owner + " has no element " + key.repr());
}

}  // namespace

const JinjaValue* JinjaValue::find(const JinjaValue& key) const {
  if (kind_ != Kind::kDict || !key.hashable()) return nullptr;
  for (const auto& [k, v] : *dict_)
    if (k.equals(key)) return &v;
  return nullptr;
}

JinjaValue JinjaValue::get(const JinjaValue& key) const {
  const JinjaValue* v = find(key);
  return v ? *v : missing(*this, key);
}

JinjaValue JinjaValue::get(const std::string& key) const {
  if (kind_ == Kind::kDict) {
    for (const auto& [k, v] : *dict_)
      if (k.is_string() && k.as_string() == key) return v;
  }
  return missing(*this, string(key));
}

void JinjaValue::set(const JinjaValue& key, JinjaValue v) const {
  if (kind_ != Kind::kDict) return;
  for (auto& [k, old] : *dict_) {
    if (k.equals(key)) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

void JinjaValue::set(const std::string& key, JinjaValue v) const { set(string(key), std::move(v)); }

bool JinjaValue::hashable() const { return hashable_at(0); }

bool JinjaValue::hashable_at(int depth) const {
  if (depth > jinja::kMaxRenderDepth) too_deep();
  switch (kind_) {
    case Kind::kList:
      if (!b_) return false;
      for (const auto& e : *list_)
        if (!e.hashable_at(depth + 1)) return false;
      return true;
    case Kind::kDict:
    case Kind::kFunction: return false;
    default: return true;
  }
}

namespace {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == std::floor(d) && std::fabs(d) < 1e16) return fmt::format("{:.1f}", d);
  return fmt::format("{}", d);
}

// Python repr() of a str: single quotes unless the text has a ' and no ".
std::string quote(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out + q;
}

}  // namespace

std::string JinjaValue::to_output() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return *s_;
    default: return repr();
  }
}

std::string JinjaValue::repr() const {
  std::string out;
  repr_into(&out, 0);
  return out;
}

void JinjaValue::repr_into(std::string* out, int depth) const {
  if (depth > jinja::kMaxRenderDepth) too_deep();
  switch (kind_) {
    case Kind::kUndefined: return;
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += b_ ? "True" : "False"; return;
    case Kind::kInt: *out += std::to_string(i_); return;
    case Kind::kFloat: *out += float_repr(d_); return;
    case Kind::kString: *out += quote(*s_); break;
    case Kind::kList: {
      *out += b_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) *out += ", ";
        (*list_)[i].repr_into(out, depth + 1);
      }
      *out += !b_ ? "]" : list_->size() == 1 ? ",)" : ")";
      break;
    }
    case Kind::kDict: {
      *out += "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i) *out += ", ";
        (*dict_)[i].first.repr_into(out, depth + 1);
        *out += ": ";
        (*dict_)[i].second.repr_into(out, depth + 1);
      }
      *out += "}";
      break;
    }
    case Kind::kFunction: *out += "<function>"; return;
  }
  // A list holding one long string many times over is small, its text is not.
  if (out->size() > jinja::kMaxOutputBytes)
    jinja::over_limit(0, "output larger than " + std::to_string(jinja::kMaxOutputBytes) + " bytes (limit kMaxOutputBytes)");
}

bool JinjaValue::equals(const JinjaValue& o) const { return equals_at(o, 0); }

bool JinjaValue::equals_at(const JinjaValue& o, int depth) const {
  if (depth > jinja::kMaxRenderDepth) too_deep();
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  if (container() && container() == o.container()) return true;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return s_ == o.s_ || *s_ == *o.s_;
    case Kind::kList: {
      if (b_ != o.b_ || list_->size() != o.list_->size()) return false;  // (1,) != [1]
      for (size_t i = 0; i < list_->size(); ++i)
        if (!(*list_)[i].equals_at((*o.list_)[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const JinjaValue* other = o.find(k);
        if (!other || !v.equals_at(*other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kFunction: return fn_ == o.fn_;
    default: return false;
  }
}

const char* JinjaValue::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return b_ ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kFunction: return "function";
  }
  return "?";
}

JinjaValue JinjaArgs::get(size_t i, const std::string& name) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return JinjaValue();
}

}  // namespace sluice::jinja
