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

void submit(cudaStream_t s, std::function<void()> work, bool copy) {
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

void record(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  const uint64_t gen = ++e->issued;
  if (defer_mode() == DeferMode::kNone || s == nullptr) {
    run_all();
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
    return;
  }
  e->pending[gen] = s;
  s->ops.push_back({.kind = CUstream_st::Op::kRecord, .event = e, .gen = gen});
}

void wait(cudaStream_t s, cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (e->issued == 0) return;  // never recorded: nothing to wait for
  if (defer_mode() == DeferMode::kNone || s == nullptr) {
    run_until_record(e, e->issued);
    return;
  }
  s->ops.push_back({.kind = CUstream_st::Op::kWait, .event = e, .gen = e->issued});
  if (defer_mode() == DeferMode::kCopies) run_stream(s);
}

void sync_stream(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (s == nullptr) {
    run_all();
  } else {
    run_stream(s);
  }
}

void sync_event(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  run_until_record(e, e->issued);
}

bool event_done(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  if (!e->pending.count(e->issued)) return true;
  // Work progresses on a GPU while the host polls: every other poll runs it.
  static uint64_t polls = 0;
  if (++polls % 2 == 0) run_until_record(e, e->issued);
  return !e->pending.count(e->issued);
}

void sync_all() {
  std::lock_guard<std::recursive_mutex> lock(streams().mu);
  run_all();
}

void submit_launch(void* stream, std::function<void()> grid) {
  submit(static_cast<cudaStream_t>(stream), std::move(grid), /*copy=*/false);
}

}  // namespace sluice_emu

// For the stand-in libcublasLt (loaded with dlopen): its matmul as work on a stream.
extern "C" void sluice_emu_submit(cudaStream_t stream, std::function<void()>* work) {
  sluice_emu::submit(stream, std::move(*work), /*copy=*/false);
}
