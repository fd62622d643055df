#include "format/metadata.h"

#include <algorithm>

#include <fmt/format.h>

namespace sluice {

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8: return "u8";
    case GgufType::kInt8: return "i8";
    case GgufType::kUint16: return "u16";
    case GgufType::kInt16: return "i16";
    case GgufType::kUint32: return "u32";
    case GgufType::kInt32: return "i32";
    case GgufType::kFloat32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "str";
    case GgufType::kArray: return "arr";
    case GgufType::kUint64: return "u64";
    case GgufType::kInt64: return "i64";
    case GgufType::kFloat64: return "f64";
  }
  return "?";
}

size_t MetaArray::size() const {
  switch (elem_type) {
    case GgufType::kFloat32:
    case GgufType::kFloat64: return floats.size();
    case GgufType::kString: return strings.size();
    case GgufType::kArray: return arrays.size();
    default: return ints.size();
  }
}

void Metadata::set(const std::string& key, MetaValue value) {
  auto [it, inserted] = kv_.insert_or_assign(key, std::move(value));
  if (inserted) order_.push_back(key);
}

void Metadata::erase(const std::string& key) {
  if (kv_.erase(key) == 0) return;
  order_.erase(std::find(order_.begin(), order_.end(), key));
}

const MetaValue* Metadata::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::optional<int64_t> Metadata::get_int(const std::string& key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(&v->value)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<int64_t>(*u);
  if (auto* b = std::get_if<bool>(&v->value)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> Metadata::get_float(const std::string& key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* d = std::get_if<double>(&v->value)) return *d;
  if (auto* i = std::get_if<int64_t>(&v->value)) return static_cast<double>(*i);
  if (auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<double>(*u);
  return std::nullopt;
}

std::optional<bool> Metadata::get_bool(const std::string& key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(&v->value)) return *b;
  if (auto* i = std::get_if<int64_t>(&v->value)) return *i != 0;
  return std::nullopt;
}

std::optional<std::string> Metadata::get_string(const std::string& key) const {
  const MetaValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&v->value)) return *s;
  return std::nullopt;
}

const MetaArray* Metadata::get_array(const std::string& key) const {
  const MetaValue* v = find(key);
  if (!v) return nullptr;
  return std::get_if<MetaArray>(&v->value);
}

std::string meta_value_summary(const MetaValue& v, size_t max_items) {
  if (auto* i = std::get_if<int64_t>(&v.value)) return std::to_string(*i);
  if (auto* u = std::get_if<uint64_t>(&v.value)) return std::to_string(*u);
  if (auto* d = std::get_if<double>(&v.value)) return fmt::format("{:g}", *d);
  if (auto* b = std::get_if<bool>(&v.value)) return *b ? "true" : "false";
  if (auto* s = std::get_if<std::string>(&v.value)) {
    std::string out = *s;
    if (out.size() > 80) out = fmt::format("{}...", out.substr(0, 77));
    for (char& c : out) if (c == '\n') c = ' ';
    return fmt::format("\"{}\"", out);
  }
  const auto& a = std::get<MetaArray>(v.value);
  const size_t n = a.size();
  std::string out = fmt::format("[{} x {}", n, gguf_type_name(a.elem_type));
  if (n <= max_items) {
    out += ":";
    for (size_t k = 0; k < n; ++k) {
      if (!a.ints.empty()) out += fmt::format(" {}", a.ints[k]);
      else if (!a.floats.empty()) out += fmt::format(" {:g}", a.floats[k]);
      else if (!a.strings.empty()) out += fmt::format(" \"{}\"", a.strings[k]);
    }
  }
  return out + "]";
}

}  // namespace sluice
