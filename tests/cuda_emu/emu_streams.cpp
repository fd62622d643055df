// The emulator's streams (emu_state.h): work runs at once (the default), or,
// under SLUICE_EMU_DEFER, waits in its stream's queue until something needs
// it, so that work the code did not order (a missing event wait, a host read
// before its copy, a copy over bytes a kernel has yet to read) goes wrong here
// as it could on a GPU.
//
//   lazy    nothing runs until the host waits for it (a stream or event
//           synchronize, a synchronous call) or a stream that runs waits for it
//   copies  kernels run as soon as their stream lets them; copies between
//           host and device wait until needed (kernels that read what a copy
//           writes without waiting for it run first)
//
// An op of a stream runs after every earlier op of that stream; a wait op
// first runs the waited stream up to the record it waits for. The legacy
// stream (null) runs everything before it first. Every queue is under one
// lock; a host thread that needs work runs it (other threads' calls wait).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "emu_state.h"
#include "sluice_emu/device.h"

namespace sluice_emu {
namespace {

struct Streams {
  std::recursive_mutex mu;
  std::set<cudaStream_t> all;
};
Streams& streams() {
  static Streams* s = new Streams();  // never destroyed: the process may still launch while exiting
  return *s;
}

// Runs the front op of s (a wait first runs what it waits for).
void run_front(cudaStream_t s);

// Runs the ops of the stream of e's record `gen` up to and including it.
void run_until_record(cudaEvent_t e, uint64_t gen) {
  for (auto it = e->pending.find(gen); it != e->pending.end(); it = e->pending.find(gen)) run_front(it->second);
}

void run_front(cudaStream_t s) {
  CUstream_st::Op op = std::move(s->ops.front());
  s->ops.pop_front();
  switch (op.kind) {
    case CUstream_st::Op::kWork: op.work(); break;
    case CUstream_st::Op::kRecord:
      op.event->at = std::chrono::steady_clock::now();
      op.event->recorded = true;
      op.event->pending.erase(op.gen);
      break;
    case CUstream_st::Op::kWait: run_until_record(op.event, op.gen); break;
  }
}

void run_stream(cudaStream_t s) {
  while (!s->ops.empty()) run_front(s);
}

void run_all() {
  Streams& st = streams();
  for (bool any = true; any;) {
    any = false;
    for (cudaStream_t s : st.all)
      if (!s->ops.empty()) {
        run_stream(s);
        any = true;
      }
  }
}

}  // namespace

namespace {
DeferMode mode_from_env() {
  const char* e = std::getenv("SLUICE_EMU_DEFER");
  if (e && std::strcmp(e, "lazy") == 0) return DeferMode::kLazy;
  if (e && std::strcmp(e, "copies") == 0) return DeferMode::kCopies;
  return DeferMode::kNone;
}
DeferMode g_mode = mode_from_env();
}  // namespace

DeferMode defer_mode() { return g_mode; }

void set_defer_mode(DeferMode m) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  run_all();  // what was queued runs before the rules change
  g_mode = m;
}

cudaStream_t new_stream(unsigned flags) {
  auto* s = new CUstream_st();
  s->flags = flags;
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  streams().all.insert(s);
  return s;
}

void delete_stream(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  run_stream(s);  // destroying a stream lets its work finish
  streams().all.erase(s);
  delete s;
}

cudaEvent_t new_event() { return new CUevent_st(); }

void delete_event(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  while (!e->pending.empty()) run_until_record(e, e->pending.begin()->first);  // no record outlives its event
  delete e;
}

namespace {
std::atomic<int> g_capturing{0};  // streams capturing now

// A call a capture forbids: the capture is invalidated (its end fails), as on a GPU.
cudaError_t break_capture(cudaStream_t s, cudaError_t e) {
  s->capture_broken = true;
  set_error(e);
  return e;
}
cudaError_t break_every_capture(cudaError_t e) {
  for (cudaStream_t s : streams().all)
    if (s->capturing) s->capture_broken = true;
  set_error(e);
  return e;
}
}  // namespace

bool capturing(cudaStream_t s) { return s != nullptr && s->capturing; }

cudaError_t capture_allows(cudaStream_t s, bool pageable) {
  if (g_capturing.load(std::memory_order_relaxed) == 0) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s == nullptr) return break_every_capture(cudaErrorStreamCaptureImplicit);  // the legacy stream joins them all
  if (s->capturing && pageable) return break_capture(s, cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

void submit(cudaStream_t s, std::function<void()> work, bool copy) {
  if (s != nullptr && s->capturing) {  // recorded, run at each launch of the graph
    s->captured.push_back({std::move(work), copy});
    return;
  }
  if (s == nullptr && capture_allows(nullptr, false) != cudaSuccess) return;  // refused, as on a GPU
  if (defer_mode() == DeferMode::kNone) {  // nothing is ever queued: no lock, launches of several threads side by side
    work();
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s == nullptr) {  // the legacy stream: after everything
    run_all();
    work();
    return;
  }
  s->ops.push_back({.kind = CUstream_st::Op::kWork, .work = std::move(work), .copy = copy});
  // Copies mode: a kernel (and what its stream holds before it) runs now.
  if (defer_mode() == DeferMode::kCopies && !copy) run_stream(s);
}

cudaError_t record(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s != nullptr && s->capturing) {  // marks a point of the capture: nothing the host may wait for
    e->captured_in = s;
    return cudaSuccess;
  }
  if (s == nullptr && g_capturing.load() > 0) return break_every_capture(cudaErrorStreamCaptureImplicit);
  e->captured_in = nullptr;
  const uint64_t gen = ++e->issued;
  if (defer_mode() == DeferMode::kNone || s == nullptr) {
    run_all();
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
    return cudaSuccess;
  }
  e->pending[gen] = s;
  s->ops.push_back({.kind = CUstream_st::Op::kRecord, .event = e, .gen = gen});
  return cudaSuccess;
}

cudaError_t wait(cudaStream_t s, cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s != nullptr && s->capturing) {
    if (e->captured_in == s) return cudaSuccess;  // the stream's own order
    return break_capture(s, cudaErrorStreamCaptureIsolation);  // work outside the capture
  }
  if (e->captured_in) return cudaErrorStreamCaptureUnsupported;  // joining a capture: not modelled here
  if (s == nullptr && g_capturing.load() > 0) return break_every_capture(cudaErrorStreamCaptureImplicit);
  if (e->issued == 0) return cudaSuccess;  // never recorded: nothing to wait for
  if (defer_mode() == DeferMode::kNone || s == nullptr) {
    run_until_record(e, e->issued);
    return cudaSuccess;
  }
  s->ops.push_back({.kind = CUstream_st::Op::kWait, .event = e, .gen = e->issued});
  if (defer_mode() == DeferMode::kCopies) run_stream(s);
  return cudaSuccess;
}

cudaError_t sync_stream(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s == nullptr) {
    if (g_capturing.load() > 0) return break_every_capture(cudaErrorStreamCaptureImplicit);
    run_all();
  } else {
    if (s->capturing) return break_capture(s, cudaErrorStreamCaptureUnsupported);
    run_stream(s);
  }
  return cudaSuccess;
}

cudaError_t sync_event(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (e->captured_in) return cudaErrorCapturedEvent;
  run_until_record(e, e->issued);
  return cudaSuccess;
}

cudaError_t event_done(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (e->captured_in) return cudaErrorCapturedEvent;
  if (!e->pending.count(e->issued)) return cudaSuccess;
  // Work progresses on a GPU while the host polls: every other poll runs it.
  static uint64_t polls = 0;
  if (++polls % 2 == 0) run_until_record(e, e->issued);
  return e->pending.count(e->issued) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t sync_all() {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (g_capturing.load() > 0) return break_every_capture(cudaErrorStreamCaptureImplicit);
  run_all();
  return cudaSuccess;
}

cudaError_t begin_capture(cudaStream_t s) {
  if (s == nullptr) return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot be captured
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s->capturing) return cudaErrorStreamCaptureUnsupported;
  s->capturing = true;
  s->capture_broken = false;
  s->captured.clear();
  ++g_capturing;
  return cudaSuccess;
}

cudaError_t end_capture(cudaStream_t s, cudaGraph_t* g) {
  *g = nullptr;
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s == nullptr || !s->capturing) return cudaErrorStreamCaptureUnmatched;
  s->capturing = false;
  --g_capturing;
  std::vector<GraphNode> nodes = std::move(s->captured);
  s->captured.clear();
  if (s->capture_broken) return cudaErrorStreamCaptureInvalidated;
  *g = new CUgraph_st{std::move(nodes)};
  return cudaSuccess;
}

void launch_graph(cudaGraphExec_t g, cudaStream_t s) {
  for (const GraphNode& n : g->nodes) submit(s, n.work, n.copy);  // each launch runs copies of the nodes
}

void submit_launch(void* stream, std::function<void()> grid) {
  submit(static_cast<cudaStream_t>(stream), std::move(grid), /*copy=*/false);
}

}  // namespace sluice_emu

// For the stand-in libcublasLt (loaded with dlopen): its matmul as work on a stream.
extern "C" void sluice_emu_submit(cudaStream_t stream, std::function<void()>* work) {
  sluice_emu::submit(stream, std::move(*work), /*copy=*/false);
}
