// HostBuffer: a Buffer in ordinary host memory, 64-byte aligned and
// zero-filled. The CPU backend's activations, and Backend::alloc_host's
// default (and a device backend's when it cannot page-lock).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "backend/backend.h"

namespace sluice {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes)
      : bytes_(bytes), data_(new (std::align_val_t{64}) uint8_t[std::max<size_t>(bytes, 1)]) {
    std::memset(data_, 0, bytes_);
  }
  ~HostBuffer() override { ::operator delete[](data_, std::align_val_t{64}); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() override { return data_; }
  size_t size() const override { return bytes_; }

 private:
  size_t bytes_;
  uint8_t* data_;
};

}  // namespace sluice
