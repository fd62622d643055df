#include "server/jinja_value.h"

#include <cmath>

#include <fmt/format.h>

namespace sluice::server {

JinjaValue JinjaValue::undefined(std::string hint) {
  JinjaValue v;
  v.s_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

JinjaValue JinjaValue::none() {
  JinjaValue v;
  v.kind_ = Kind::kNone;
  return v;
}

JinjaValue JinjaValue::boolean(bool b) {
  JinjaValue v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

JinjaValue JinjaValue::integer(int64_t i) {
  JinjaValue v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

JinjaValue JinjaValue::number(double d) {
  JinjaValue v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

JinjaValue JinjaValue::string(std::string s) {
  JinjaValue v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<std::string>(std::move(s));
  return v;
}

JinjaValue JinjaValue::markup(std::string s) {
  JinjaValue v = string(std::move(s));
  v.b_ = true;
  return v;
}

JinjaValue JinjaValue::list(JinjaList items) {
  JinjaValue v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<JinjaList>(std::move(items));
  return v;
}

JinjaValue JinjaValue::tuple(JinjaList items) {
  JinjaValue v = list(std::move(items));
  v.b_ = true;
  return v;
}

JinjaValue JinjaValue::dict(JinjaDict items) {
  JinjaValue v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<JinjaDict>(std::move(items));
  return v;
}

JinjaValue JinjaValue::function(JinjaFunction fn) {
  JinjaValue v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<JinjaFunction>(std::move(fn));
  return v;
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
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json(e));
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

JinjaValue JinjaValue::get(const std::string& key) const {
  if (kind_ == Kind::kDict) {
    for (const auto& [k, v] : *dict_)
      if (k == key) return v;
  }
  return undefined(std::string("'") + (kind_ == Kind::kDict ? "dict" : type_name()) + " object' has no attribute '" +
                   key + "'");
}

void JinjaValue::set(const std::string& key, JinjaValue v) const {
  if (kind_ != Kind::kDict) return;
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
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
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return float_repr(d_);
    case Kind::kString: return quote(*s_);
    case Kind::kList: {
      std::string out = b_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      if (b_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + quote((*dict_)[i].first) + ": " + (*dict_)[i].second.repr();
      return out + "}";
    }
    case Kind::kFunction: return "<function>";
  }
  return "";
}

nlohmann::ordered_json JinjaValue::to_json() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
    case Kind::kFunction: return nullptr;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_;
    case Kind::kFloat: return d_;
    case Kind::kString: return *s_;
    case Kind::kList: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& e : *list_) a.push_back(e.to_json());
      return a;
    }
    case Kind::kDict: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& [k, e] : *dict_) o[k] = e.to_json();
      return o;
    }
  }
  return nullptr;
}

bool JinjaValue::equals(const JinjaValue& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return *s_ == *o.s_;
    case Kind::kList: {
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i)
        if (!(*list_)[i].equals((*o.list_)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        JinjaValue other = o.get(k);
        if (other.is_undefined() || !v.equals(other)) return false;
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
    case Kind::kList: return "list";
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

}  // namespace sluice::server
