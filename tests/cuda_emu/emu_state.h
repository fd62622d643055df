// What the emulator's pieces share: the thread's last error, counters, the
// emulated device memory (emu_memory.cpp) and its accounting.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>

#include "cuda_runtime.h"
#include "sluice_emu/halves.h"

namespace sluice_emu {

void set_error(cudaError_t e);
// Device memory charged against the emulated capacity; false (nothing
// charged) past it.
bool charge_device(size_t bytes);
void refund_device(size_t bytes);
size_t device_capacity();

// Device memory (emu_memory.cpp): inaccessible to host code except while a
// DeviceAccess lives on some thread (the emulator's launches, copies, fills).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
void* device_alloc(size_t bytes);           // null: the reserved range is full
bool device_free(void* p);                  // false: not an allocation of device_alloc
size_t device_alloc_size(const void* p);    // the bytes asked; 0: not an allocation
// A driver-API range made accessible (mapped and opened) or not any more.
void device_range_mapped(void* p, size_t bytes, bool accessible);
// Whether p lies in device memory (an allocation's or a mapped range's).
bool is_device_pointer(const void* p);
// Whether p lies in pinned host memory (cudaMallocHost, cudaHostRegister).
bool is_pinned(const void* p);

// Streams (emu_streams.cpp): work runs at once, or with SLUICE_EMU_DEFER
// (lazy, copies) when something needs it.
enum class DeferMode { kNone, kLazy, kCopies };
DeferMode defer_mode();
void set_defer_mode(DeferMode m);  // tests; what is queued runs first
cudaStream_t new_stream(unsigned flags);
void delete_stream(cudaStream_t s);
cudaEvent_t new_event();
void delete_event(cudaEvent_t e);
// Work on stream s (null: the legacy stream, after everything before it);
// copy: it moves bytes between host and device.
void submit(cudaStream_t s, std::function<void()> work, bool copy);
void record(cudaEvent_t e, cudaStream_t s);
void wait(cudaStream_t s, cudaEvent_t e);
void sync_stream(cudaStream_t s);  // null: every stream
void sync_event(cudaEvent_t e);
bool event_done(cudaEvent_t e);
void sync_all();

}  // namespace sluice_emu

// A stream's queue and an event's records (emu_streams.cpp).
struct CUstream_st {
  unsigned flags = 0;
  struct Op {
    enum Kind { kWork, kRecord, kWait } kind = kWork;
    std::function<void()> work;  // kWork
    bool copy = false;           // kWork: a copy between host and device
    cudaEvent_t event = nullptr;  // kRecord, kWait
    uint64_t gen = 0;             // the record's generation
  };
  std::deque<Op> ops;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
  uint64_t issued = 0;                           // records issued (the last one's generation)
  std::map<uint64_t, cudaStream_t> pending;      // records not run yet: generation -> stream
};
