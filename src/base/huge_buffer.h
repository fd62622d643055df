// HugeBuffer: a zero-filled anonymous memory region for large, long-lived arrays
// that are read over and over (KV cache rows, repacked weights), asked to be
// backed by transparent huge pages (madvise(MADV_HUGEPAGE) before first touch).
// With 4 KiB pages, a step that reads scattered 128-byte K/V slices or streams
// a gigabyte of weights takes a page walk every few rows; 2 MiB pages take one
// every 2 MiB. Where the kernel gives no huge pages the buffer is an ordinary
// one. Move-only; the bytes are owned until destruction. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice {

// The transparent huge page size on x86-64.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Gives the whole pages inside [p, p + n_bytes) back to the system
// (madvise(MADV_DONTNEED)): anonymous memory reads as zeros afterwards and
// takes fresh pages where it is written again. For pools that shrink (the
// fluid split's KV blocks and expert slots).
void release_pages(uint8_t* p, size_t n_bytes);

// Asks the kernel to back [p, p + n_bytes) with transparent huge pages at its
// first touch (madvise(MADV_HUGEPAGE)); p should be kHugePageBytes-aligned. A
// hint: where THP is off the pages stay 4 KiB.
void advise_huge_pages(void* p, size_t n_bytes);

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // n_bytes of zeros (none for 0). Aborts if the address space is exhausted,
  // as std::vector would.
  explicit HugeBuffer(size_t n_bytes);
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (size_ rounded up to 2 MiB)
};

}  // namespace sluice
