// What the emulator's pieces share: the thread's last error, counters, the
// emulated device memory (emu_memory.cpp) and its accounting.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "cuda_runtime.h"
#include "sluice_emu/halves.h"

namespace sluice_emu {

// One node of a captured graph: a kernel, a copy or a fill, run at each launch.
struct GraphNode {
  std::function<void()> work;
  bool copy = false;  // a copy between host and device (the node's kind)
};

void set_error(cudaError_t e);
void count_host_wait();  // host_waits.h: one more wait on this thread
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
// copy: it moves bytes between host and device. On a stream being captured
// the work is recorded, not run (cudaStreamBeginCapture).
void submit(cudaStream_t s, std::function<void()> work, bool copy);
// The calls below return what a GPU returns when they break a capture's
// rules (emu_streams.cpp): cudaSuccess otherwise.
cudaError_t record(cudaEvent_t e, cudaStream_t s);
cudaError_t wait(cudaStream_t s, cudaEvent_t e);
cudaError_t sync_stream(cudaStream_t s);  // null: every stream
cudaError_t sync_event(cudaEvent_t e);
cudaError_t event_done(cudaEvent_t e);    // cudaErrorNotReady: not yet
cudaError_t sync_all();
// An asynchronous call on s (null: the legacy stream) that touches pageable
// host memory (pageable) or not: whether a capture under way allows it.
cudaError_t capture_allows(cudaStream_t s, bool pageable);
// Stream capture and graphs (cudaStreamBeginCapture ... cudaGraphLaunch).
cudaError_t begin_capture(cudaStream_t s);
cudaError_t end_capture(cudaStream_t s, cudaGraph_t* g);
bool capturing(cudaStream_t s);
void launch_graph(cudaGraphExec_t g, cudaStream_t s);

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
  // Stream capture: the work recorded instead of run, and whether a call the
  // capture forbids has invalidated it.
  bool capturing = false;
  bool capture_broken = false;
  std::vector<sluice_emu::GraphNode> captured;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
  uint64_t issued = 0;                           // records issued (the last one's generation)
  std::map<uint64_t, cudaStream_t> pending;      // records not run yet: generation -> stream
  cudaStream_t captured_in = nullptr;            // last recorded in this stream's capture
};
// A graph (a capture's work, in order) and its executable copy.
struct CUgraph_st {
  std::vector<sluice_emu::GraphNode> nodes;
};
struct CUgraphExec_st {
  std::vector<sluice_emu::GraphNode> nodes;
};
