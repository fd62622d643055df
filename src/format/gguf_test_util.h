// Test helper: builds small GGUF files byte by byte, including malformed ones.
//
// Counts in the fixed header are the number of key()/tensor() calls unless given
// explicitly (to build files that lie). Raw u8/u16/u32/u64/str calls append to the
// metadata section, so any value encoding can be written by hand.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf_reader.h"

namespace sluice::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, std::optional<uint64_t> n_tensors = std::nullopt,
                       std::optional<uint64_t> n_kv = std::nullopt)
      : version_(version), n_tensors_override_(n_tensors), n_kv_override_(n_kv) {}

  GgufBuilder& u8(uint8_t v) { return raw(&v, 1); }
  GgufBuilder& u16(uint16_t v) { return raw(&v, 2); }
  GgufBuilder& u32(uint32_t v) { return raw(&v, 4); }
  GgufBuilder& u64(uint64_t v) { return raw(&v, 8); }
  GgufBuilder& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBuilder& key(const std::string& k) {
    ++n_kv_;
    return str(k);
  }

  GgufBuilder& kv_u8(const std::string& k, uint8_t v) { return key(k).u32(0).u8(v); }
  GgufBuilder& kv_i8(const std::string& k, int8_t v) { return key(k).u32(1).u8(uint8_t(v)); }
  GgufBuilder& kv_u16(const std::string& k, uint16_t v) { return key(k).u32(2).u16(v); }
  GgufBuilder& kv_i16(const std::string& k, int16_t v) { return key(k).u32(3).u16(uint16_t(v)); }
  GgufBuilder& kv_u32(const std::string& k, uint32_t v) {
    if (k == "general.alignment" && v != 0) alignment_ = v;
    return key(k).u32(4).u32(v);
  }
  GgufBuilder& kv_i32(const std::string& k, int32_t v) { return key(k).u32(5).u32(uint32_t(v)); }
  GgufBuilder& kv_f32(const std::string& k, float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return key(k).u32(6).u32(u);
  }
  GgufBuilder& kv_bool(const std::string& k, bool v) { return key(k).u32(7).u8(v ? 1 : 0); }
  GgufBuilder& kv_str(const std::string& k, const std::string& v) { return key(k).u32(8).str(v); }
  GgufBuilder& kv_u64(const std::string& k, uint64_t v) { return key(k).u32(10).u64(v); }
  GgufBuilder& kv_i64(const std::string& k, int64_t v) { return key(k).u32(11).u64(uint64_t(v)); }
  GgufBuilder& kv_f64(const std::string& k, double v) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return key(k).u32(12).u64(u);
  }

  // A tensor info: name, dims (innermost first), raw ggml type id, data offset.
  GgufBuilder& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                      uint64_t offset) {
    ++n_tensors_;
    put(&tensors_, name.size());
    tensors_.insert(tensors_.end(), name.begin(), name.end());
    put(&tensors_, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put(&tensors_, d);
    put(&tensors_, type);
    put(&tensors_, offset);
    return *this;
  }
  // Tensor data section of n bytes (after alignment padding), filled with a pattern.
  GgufBuilder& data_bytes(size_t n) {
    data_size_ = n;
    return *this;
  }

  const std::vector<uint8_t>& bytes() {
    file_.clear();
    put(&file_, uint32_t{0x46554747});
    put(&file_, version_);
    put(&file_, n_tensors_override_.value_or(n_tensors_));
    put(&file_, n_kv_override_.value_or(n_kv_));
    file_.insert(file_.end(), kv_.begin(), kv_.end());
    file_.insert(file_.end(), tensors_.begin(), tensors_.end());
    if (data_size_ > 0) {
      while (file_.size() % alignment_ != 0) file_.push_back(0);
      for (size_t i = 0; i < data_size_; ++i) file_.push_back(static_cast<uint8_t>(i * 7 + 1));
    }
    return file_;
  }
  StatusOr<ModelFile> parse() {
    const std::vector<uint8_t>& b = bytes();
    return parse_gguf(b.data(), b.size(), "test.gguf");
  }

 private:
  template <typename T>
  static void put(std::vector<uint8_t>* out, T v) {
    const size_t at = out->size();
    out->resize(at + sizeof(T));
    std::memcpy(out->data() + at, &v, sizeof(T));
  }
  GgufBuilder& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    kv_.insert(kv_.end(), b, b + n);
    return *this;
  }

  uint32_t version_;
  std::optional<uint64_t> n_tensors_override_, n_kv_override_;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  uint64_t alignment_ = 32;
  size_t data_size_ = 0;
  std::vector<uint8_t> kv_, tensors_, file_;
};

}  // namespace sluice::testing
