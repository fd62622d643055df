// The emulator's runtime API (cuda_runtime.h): device memory in host memory,
// streams that run their work at once, events stamped when recorded.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "cuda.h"
#include "cuda_runtime.h"
#include "emu_state.h"

namespace sluice_emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;

struct Memory {
  std::mutex mu;
  std::map<void*, size_t> host;
  size_t used = 0;
};
Memory& memory() {
  static Memory* m = new Memory();  // never destroyed: static destructors may still free
  return *m;
}

size_t capacity_from_env() {
  const char* e = std::getenv("SLUICE_EMU_DEVICE_MIB");
  const long long mib = e ? std::atoll(e) : 16384;
  return static_cast<size_t>(mib > 0 ? mib : 16384) << 20;
}

// Fresh device memory holds 0xff bytes (a NaN in every float type), so a
// kernel that reads what nothing wrote shows it in its results.
bool poison() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_EMU_POISON");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

cudaError_t fail(cudaError_t e) {
  set_error(e);
  return e;
}

}  // namespace

void set_error(cudaError_t e) { t_last_error = e; }

size_t device_capacity() {
  static const size_t c = capacity_from_env();
  return c;
}
bool charge_device(size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.used + bytes > device_capacity()) return false;
  m.used += bytes;
  return true;
}
void refund_device(size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.used -= bytes;
}

}  // namespace sluice_emu

using sluice_emu::fail;

struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

cudaError_t cudaGetLastError() {
  const cudaError_t e = sluice_emu::t_last_error;
  sluice_emu::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return sluice_emu::t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory (the emulated device's SLUICE_EMU_DEVICE_MIB)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unknown error";
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return fail(cudaErrorInvalidDevice);
  *p = {};
  std::snprintf(p->name, sizeof(p->name), "sluice CUDA emulator (CPU)");
  p->totalGlobalMem = sluice_emu::device_capacity();
  p->sharedMemPerBlock = 48 << 10;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->multiProcessorCount = 132;
  p->l2CacheSize = 50 << 20;
  p->major = 9;
  p->minor = 0;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  sluice_emu::Memory& m = sluice_emu::memory();
  std::lock_guard<std::mutex> lock(m.mu);
  *total_bytes = sluice_emu::device_capacity();
  *free_bytes = *total_bytes - m.used;
  return cudaSuccess;
}

namespace {
size_t charged(size_t bytes) { return (bytes + 255) / 256 * 256; }
}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (!sluice_emu::charge_device(charged(bytes))) return fail(cudaErrorMemoryAllocation);
  void* q = sluice_emu::device_alloc(bytes);
  if (q == nullptr) {
    sluice_emu::refund_device(charged(bytes));
    return fail(cudaErrorMemoryAllocation);
  }
  if (sluice_emu::poison() && bytes > 0) {
    sluice_emu::DeviceAccess open;
    std::memset(q, 0xff, bytes);
  }
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  const size_t bytes = sluice_emu::device_alloc_size(p);
  if (!sluice_emu::device_free(p)) return fail(cudaErrorInvalidValue);
  sluice_emu::refund_device(charged(bytes));
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + (bytes == 0 ? 4096 : 0));
  if (*p == nullptr) return fail(cudaErrorMemoryAllocation);
  sluice_emu::Memory& m = sluice_emu::memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.host[*p] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  sluice_emu::Memory& m = sluice_emu::memory();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.host.erase(p) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  return p != nullptr && bytes > 0 ? cudaSuccess : fail(cudaErrorInvalidValue);
}
cudaError_t cudaHostUnregister(void* p) { return p != nullptr ? cudaSuccess : fail(cudaErrorInvalidValue); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return fail(cudaErrorInvalidValue);
  if (bytes > 0) {
    sluice_emu::DeviceAccess open;
    std::memmove(dst, src, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes > 0 && p == nullptr) return fail(cudaErrorInvalidValue);
  if (bytes > 0) {
    sluice_emu::DeviceAccess open;
    std::memset(p, value, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned) {
  return e != nullptr ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e != nullptr ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaEventQuery(cudaEvent_t e) { return e != nullptr ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || !start->recorded || !end->recorded) return fail(cudaErrorInvalidValue);
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  struct Entry {
    const char* name;
    void* fn;
  };
  static const Entry entries[] = {
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
  };
  for (const Entry& e : entries) {
    if (std::strcmp(e.name, symbol) == 0) {
      *fn = e.fn;
      if (status) *status = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  }
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
