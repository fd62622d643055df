// The emulator's runtime API (cuda_runtime.h): device memory in host memory,
// streams that run their work at once, events stamped when recorded.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <new>
#include <vector>

#include "cuda.h"
#include "cuda_runtime.h"
#include "emu_state.h"
#include "sluice_emu/host_waits.h"

namespace sluice_emu {
namespace {

thread_local cudaError_t t_last_error = cudaSuccess;

struct Memory {
  std::mutex mu;
  std::map<const char*, size_t> host;        // cudaMallocHost's
  std::map<const char*, size_t> registered;  // cudaHostRegister's
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

namespace {
thread_local int64_t t_host_waits = 0;
}  // namespace
int64_t host_waits() { return t_host_waits; }
void count_host_wait() { ++t_host_waits; }

bool is_pinned(const void* p) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const char* c = static_cast<const char*>(p);
  auto in = [c](const auto& ranges) {
    auto it = ranges.upper_bound(c);
    if (it == ranges.begin()) return false;
    --it;
    return c < it->first + it->second;
  };
  return in(m.registered) || in(m.host);
}

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
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorGraphExecUpdateFailure: return "cudaErrorGraphExecUpdateFailure";
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
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
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
cudaError_t cudaDeviceSynchronize() {
  sluice_emu::count_host_wait();
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);
  return cudaSuccess;
}
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
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);  // as on a GPU, the device's work first
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
  m.host[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  if (a == nullptr) return fail(cudaErrorInvalidValue);
  *a = cudaPointerAttributes{};
  void* q = const_cast<void*>(p);
  if (sluice_emu::is_device_pointer(p)) {
    *a = {.type = cudaMemoryTypeDevice, .device = 0, .devicePointer = q, .hostPointer = nullptr};
  } else if (sluice_emu::is_pinned(p)) {
    *a = {.type = cudaMemoryTypeHost, .device = 0, .devicePointer = q, .hostPointer = q};
  }
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);
  sluice_emu::Memory& m = sluice_emu::memory();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.host.erase(static_cast<const char*>(p)) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  if (p == nullptr || bytes == 0) return fail(cudaErrorInvalidValue);
  sluice_emu::Memory& m = sluice_emu::memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.registered[static_cast<const char*>(p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);  // no copy reads it afterwards
  sluice_emu::Memory& m = sluice_emu::memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.registered.erase(static_cast<const char*>(p));
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return fail(cudaErrorInvalidValue);
  sluice_emu::count_host_wait();
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);  // the legacy stream: after everything
  if (bytes > 0) {
    sluice_emu::DeviceAccess open;
    std::memmove(dst, src, bytes);
  }
  return cudaSuccess;
}
// Deferred (SLUICE_EMU_DEFER), a copy runs when its stream reaches it, as on a
// GPU: the host bytes of a pinned source are read then. A pageable source is
// staged at the call (the call returns once it may be reused), and a copy to
// pageable memory returns once done.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return fail(cudaErrorInvalidValue);
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = sluice_emu::is_device_pointer(dst), src_dev = sluice_emu::is_device_pointer(src);
  const bool host_side = !dst_dev || !src_dev;
  const bool pageable = (!dst_dev && !sluice_emu::is_pinned(dst)) || (!src_dev && !sluice_emu::is_pinned(src));
  if (cudaError_t e = sluice_emu::capture_allows(s, pageable)) return fail(e);
  if (!dst_dev && !sluice_emu::is_pinned(dst)) {  // to pageable memory: synchronous
    if (cudaError_t e = sluice_emu::sync_stream(s)) return fail(e);
    sluice_emu::DeviceAccess open;
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  if (!src_dev && !sluice_emu::is_pinned(src)) {  // from pageable memory: staged now
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    sluice_emu::submit(s, [dst, staged] {
      sluice_emu::DeviceAccess open;
      std::memcpy(dst, staged->data(), staged->size());
    }, true);
    return cudaSuccess;
  }
  sluice_emu::submit(s, [dst, src, bytes] {
    sluice_emu::DeviceAccess open;
    std::memmove(dst, src, bytes);
  }, host_side);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (bytes > 0 && p == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sluice_emu::sync_all()) return fail(e);
  if (bytes > 0) {
    sluice_emu::DeviceAccess open;
    std::memset(p, value, bytes);
  }
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (bytes > 0 && p == nullptr) return fail(cudaErrorInvalidValue);
  if (bytes == 0) return cudaSuccess;
  if (cudaError_t e = sluice_emu::capture_allows(s, false)) return fail(e);
  sluice_emu::submit(s, [p, value, bytes] {
    sluice_emu::DeviceAccess open;
    std::memset(p, value, bytes);
  }, false);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = sluice_emu::new_stream(flags);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  sluice_emu::delete_stream(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  sluice_emu::count_host_wait();
  if (cudaError_t e = sluice_emu::sync_stream(s)) return fail(e);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t err = sluice_emu::wait(s, e)) return fail(err);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (cudaError_t e = sluice_emu::begin_capture(s)) return fail(e);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sluice_emu::end_capture(s, graph)) return fail(e);
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = !sluice_emu::capturing(s)  ? cudaStreamCaptureStatusNone
            : s->capture_broken        ? cudaStreamCaptureStatusInvalidated
                                       : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* n) {
  if (graph == nullptr || n == nullptr || nodes != nullptr) return fail(cudaErrorInvalidValue);  // the count only
  *n = graph->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  if (exec == nullptr || graph == nullptr || info == nullptr) return fail(cudaErrorInvalidValue);
  *info = {cudaGraphExecUpdateSuccess, nullptr, nullptr};
  bool same = exec->nodes.size() == graph->nodes.size();
  for (size_t i = 0; same && i < graph->nodes.size(); ++i) same = exec->nodes[i].copy == graph->nodes[i].copy;
  if (!same) {
    info->result = exec->nodes.size() == graph->nodes.size() ? cudaGraphExecUpdateErrorNodeTypeChanged
                                                              : cudaGraphExecUpdateErrorTopologyChanged;
    return fail(cudaErrorGraphExecUpdateFailure);
  }
  exec->nodes = graph->nodes;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t e = sluice_emu::capture_allows(s, false)) return fail(e);
  sluice_emu::launch_graph(exec, s);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = sluice_emu::new_event();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  sluice_emu::delete_event(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t err = sluice_emu::record(e, s)) return fail(err);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  sluice_emu::count_host_wait();
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t err = sluice_emu::sync_event(e)) return fail(err);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  const cudaError_t err = sluice_emu::event_done(e);
  return err == cudaErrorCapturedEvent ? fail(err) : err;
}
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
