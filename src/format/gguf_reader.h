// GGUF reader: GGUF v2/v3 file -> ModelFile, without copying tensor data.
//
// Format (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { gguf string key | u32 type | value }      (arrays: u32 elem type, u64 n, elems)
//   n_tensors x { gguf string name | u32 n_dims | n_dims x u64 ne | u32 ggml type | u64 offset }
//   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
//   gguf string = u64 length + bytes (no terminator)
// Every count, length, dimension and offset is checked against the file size and
// sane limits before anything is allocated: a truncated, lying or hostile file
// yields a kDataLoss/kUnimplemented Status naming the problem, never a crash.
#pragma once

#include <string>

#include "format/model_file.h"

namespace sluice {

// Memory-maps `path` and parses it. Tensor data is borrowed from the mapping.
StatusOr<ModelFile> read_gguf(const std::string& path);

// Parses GGUF bytes already in memory (`data` must outlive the result, which
// borrows tensor bytes from it). `name` is used in error messages.
StatusOr<ModelFile> parse_gguf(const uint8_t* data, size_t size, const std::string& name);

}  // namespace sluice
