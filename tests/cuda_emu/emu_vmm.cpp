// The driver's virtual memory management (cuda.h) over mmap: a reservation
// is an inaccessible mapping, an allocation a memfd, a map places it over the
// reservation and cuMemSetAccess opens it. A kernel touching a reserved
// address that nothing is mapped at faults, as it would on the device.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "cuda.h"
#include "emu_state.h"

namespace {

constexpr size_t kGranule = size_t{2} << 20;

struct Handle {
  int fd;
  size_t bytes;
};
std::mutex g_mu;
std::map<CUmemGenericAllocationHandle, Handle>& handles() {
  static auto* h = new std::map<CUmemGenericAllocationHandle, Handle>();
  return *h;
}
CUmemGenericAllocationHandle g_next = 1;

}  // namespace

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp*,
                                       CUmemAllocationGranularity_flags) {
  *granularity = kGranule;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
  if (size == 0 || size % kGranule != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t align = alignment > kGranule ? alignment : kGranule;
  void* p = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<uintptr_t>(p), start = (base + align - 1) / align * align;
  if (start > base) munmap(p, start - base);
  const uintptr_t end = start + size, map_end = base + size + align;
  if (map_end > end) munmap(reinterpret_cast<void*>(end), map_end - end);
  *ptr = start;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return munmap(reinterpret_cast<void*>(ptr), size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp*,
                     unsigned long long) {
  if (size == 0 || size % kGranule != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!sluice_emu::charge_device(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = memfd_create("sluice-emu-vmm", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    sluice_emu::refund_device(size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  *handle = g_next++;
  handles()[*handle] = {fd, size};
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Handle h;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = handles().find(handle);
    if (it == handles().end()) return CUDA_ERROR_INVALID_VALUE;
    h = it->second;
    handles().erase(it);
  }
  close(h.fd);  // a mapping still in place keeps the memory until unmapped, as the driver's
  sluice_emu::refund_device(h.bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = handles().find(handle);
    if (it == handles().end() || offset + size > it->second.bytes) return CUDA_ERROR_INVALID_VALUE;
    fd = it->second.fd;
  }
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd,
                 static_cast<off_t>(offset));
  return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  sluice_emu::device_range_mapped(reinterpret_cast<void*>(ptr), size, false);
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
                 -1, 0);
  return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (count == 0 || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PROT_READ
                                                                         : PROT_NONE;
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Open to kernels and the emulator's copies only, like the rest of device memory.
  sluice_emu::device_range_mapped(reinterpret_cast<void*>(ptr), size, prot != PROT_NONE);
  return CUDA_SUCCESS;
}
