#include "format/safetensors_header.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

namespace sluice {
namespace {

// The safetensors reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kMaxDims = 8;

struct DTypeSize {
  const char* name;
  uint64_t bytes;
};
constexpr DTypeSize kDTypeSizes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
    {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
    {"F64", 8},  {"I64", 8}, {"U64", 8},
};

}  // namespace

uint64_t safetensors_dtype_bytes(const std::string& dtype) {
  for (const DTypeSize& d : kDTypeSizes) {
    if (dtype == d.name) return d.bytes;
  }
  return 0;
}

StatusOr<std::vector<SafetensorsEntry>> parse_safetensors_header(const uint8_t* data,
                                                                 size_t size,
                                                                 const std::string& name) {
  if (size < 8) return data_loss("{}: {} bytes, too short for a safetensors file", name, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes) {
    return data_loss("{}: header length {} exceeds the {}-byte limit", name, header_len,
                     kMaxHeaderBytes);
  }
  if (header_len > size - 8) {
    return data_loss("{}: header length {} exceeds the file size {}", name, header_len, size);
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  const nlohmann::json header =
      nlohmann::json::parse(text, text + header_len, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return data_loss("{}: header is not valid JSON", name);
  if (!header.is_object()) return data_loss("{}: header is not a JSON object", name);

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  std::vector<SafetensorsEntry> entries;
  entries.reserve(header.size());
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") continue;
    SafetensorsEntry e;
    e.name = key;
    if (!v.is_object()) return data_loss("{}: entry '{}' is not an object", name, key);
    const auto dtype = v.find("dtype");
    const auto shape = v.find("shape");
    const auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string()) {
      return data_loss("{}: tensor '{}' has no string 'dtype'", name, key);
    }
    e.dtype = dtype->get<std::string>();
    const uint64_t elem_bytes = safetensors_dtype_bytes(e.dtype);
    if (elem_bytes == 0) return data_loss("{}: tensor '{}' has unknown dtype '{}'", name, key, e.dtype);
    if (shape == v.end() || !shape->is_array() || shape->size() > kMaxDims) {
      return data_loss("{}: tensor '{}' needs a 'shape' array of at most {} dims", name, key,
                       kMaxDims);
    }
    uint64_t n_elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) {
        return data_loss("{}: tensor '{}' has a shape entry of JSON type {}, not a "
                         "non-negative integer",
                         name, key, d.type_name());
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(n_elements, dim, &n_elements)) {
        return data_loss("{}: tensor '{}' shape overflows at dimension {}", name, key, dim);
      }
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return data_loss("{}: tensor '{}' needs 'data_offsets' [begin, end] of non-negative "
                       "integers",
                       name, key);
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return data_loss("{}: tensor '{}' data_offsets [{}, {}] outside the data region of {} "
                       "bytes",
                       name, key, begin, end, data_size);
    }
    uint64_t expect_bytes = 0;
    if (__builtin_mul_overflow(n_elements, elem_bytes, &expect_bytes) ||
        expect_bytes != end - begin) {
      return data_loss("{}: tensor '{}' has {} bytes, but {} {} elements of {} bytes are needed",
                       name, key, end - begin, n_elements, e.dtype, elem_bytes);
    }
    e.offset = data_start + begin;
    e.n_bytes = end - begin;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.offset < b.offset; });
  uint64_t prev_end = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.n_bytes == 0) continue;
    if (prev != nullptr && e.offset < prev_end) {
      return data_loss("{}: tensor '{}' (data offset {}) overlaps tensor '{}'", name, e.name,
                       e.offset - data_start, prev->name);
    }
    prev_end = e.offset + e.n_bytes;
    prev = &e;
  }
  return entries;
}

}  // namespace sluice
