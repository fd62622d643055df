// MappedFile: a read-only memory map of a whole file.
//
// Owns the mapping; data() stays valid until the object is destroyed. Never
// copies the file. Thread-safe for concurrent reads. Moving is allowed, copying
// is not. An empty file maps to size() == 0 and data() == nullptr.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice {

class MappedFile {
 public:
  // Maps `path` read-only. Errors: not found, not a regular file, mmap failure.
  static StatusOr<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string. For config/tokenizer JSON, not weights.
StatusOr<std::string> read_text_file(const std::string& path);

}  // namespace sluice
