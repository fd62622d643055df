#include "base/huge_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <utility>

#include "base/check.h"

namespace sluice {

void advise_huge_pages(void* p, size_t n_bytes) { madvise(p, n_bytes, MADV_HUGEPAGE); }

void release_pages(uint8_t* p, size_t n_bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n_bytes;
  const uintptr_t a = (begin + page - 1) / page * page, b = end / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

HugeBuffer::HugeBuffer(size_t n_bytes) : size_(n_bytes) {
  if (n_bytes == 0) return;
  mapped_ = (n_bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED && "HugeBuffer: mmap failed");
  advise_huge_pages(p, mapped_);
  data_ = static_cast<uint8_t*>(p);
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, mapped_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() {
  if (data_) munmap(data_, mapped_);
}

}  // namespace sluice
