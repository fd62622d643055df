// safetensors container parsing: the header of one .safetensors file.
//
// Layout (little-endian):
//
//   | u64 N | N bytes JSON header                  | data region ...           |
//   0       8                                      8+N                         EOF
//
//   JSON: { "__metadata__": {...}?, "<name>": { "dtype": "F32",
//           "shape": [out, in], "data_offsets": [begin, end] }, ... }
//   begin/end are relative to the data region; a tensor is row-major with the
//   last shape entry contiguous.
//
// The parser checks the header length against the file, every offset against the
// data region, that end - begin == product(shape) * dtype size, and that tensors do
// not overlap. It knows the sizes of all safetensors dtypes; which ones a reader
// supports is the reader's decision. Pure function of the bytes; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // as written: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // outermost first, as written
  uint64_t offset = 0;         // absolute byte offset in the file
  uint64_t n_bytes = 0;
};

// Bytes per element of a safetensors dtype name, or 0 if the name is unknown.
uint64_t safetensors_dtype_bytes(const std::string& dtype);

// Parses and validates the header of `size` bytes at `data`; entries come out in
// file-offset order. `name` is used in error messages.
StatusOr<std::vector<SafetensorsEntry>> parse_safetensors_header(const uint8_t* data,
                                                                 size_t size,
                                                                 const std::string& name);

}  // namespace sluice
