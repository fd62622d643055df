// Metadata: the key/value store of a model file, typed as in GGUF.
//
// GGUF value types are kept exactly (a uint32 stays a uint32) so that a file read
// and written back is byte-identical. Importers for other formats (HF config.json,
// llama2.c) fill the same store with GGUF-convention keys ("llama.block_count",
// "tokenizer.ggml.tokens", ...), so everything downstream reads one vocabulary of
// keys. Typed getters convert between integer widths and between float widths, and
// return nullopt if the key is absent or of an incompatible type.
// Not thread-safe for writes; concurrent reads are fine.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice {

// The GGUF container's constants, shared by the reader and the writer.
inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint64_t kGgufDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr int kGgufMaxArrayDepth = 8;           // nesting of array values

// GGUF metadata value type ids (gguf_type).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* gguf_type_name(GgufType type);

// An array value: one element type, stored in the widest matching C++ type.
struct MetaArray {
  GgufType elem_type = GgufType::kUint8;
  // Exactly one of these is used, chosen by elem_type:
  std::vector<int64_t> ints;        // all signed/unsigned integer types and bool
  std::vector<double> floats;       // float32/float64
  std::vector<std::string> strings; // string
  // Nested arrays are legal GGUF but unused by any model; kept for round trips.
  std::vector<struct MetaValue> arrays;

  size_t size() const;
};

struct MetaValue {
  GgufType type = GgufType::kUint8;
  // uint64 values above INT64_MAX are kept in `u`; all other integers in `i`.
  std::variant<int64_t, uint64_t, double, bool, std::string, MetaArray> value;

  static MetaValue u32(uint32_t v) { return {GgufType::kUint32, int64_t{v}}; }
  static MetaValue i32(int32_t v) { return {GgufType::kInt32, int64_t{v}}; }
  static MetaValue u64(uint64_t v) { return {GgufType::kUint64, v}; }
  static MetaValue f32(float v) { return {GgufType::kFloat32, double{v}}; }
  static MetaValue boolean(bool v) { return {GgufType::kBool, v}; }
  static MetaValue str(std::string v) { return {GgufType::kString, std::move(v)}; }
  static MetaValue array(MetaArray a) { return {GgufType::kArray, std::move(a)}; }
};

class Metadata {
 public:
  // Inserts or replaces; a new key goes to the end of the key order.
  void set(const std::string& key, MetaValue value);
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const MetaValue* find(const std::string& key) const;
  void erase(const std::string& key);
  size_t size() const { return kv_.size(); }

  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;  // also accepts ints
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  const MetaArray* get_array(const std::string& key) const;

  // Keys in insertion order (the order a file is read or written in).
  const std::vector<std::string>& keys() const { return order_; }

 private:
  std::map<std::string, MetaValue> kv_;
  std::vector<std::string> order_;
};

// Short human-readable rendering of a value ("[32000 strings]" for big arrays).
std::string meta_value_summary(const MetaValue& v, size_t max_items = 8);

}  // namespace sluice
