#include "backend/cuda/cuda_step_graph.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.cuh"

namespace sluice::cuda {

namespace {
std::atomic<int> g_enabled{-1};  // set_enabled's choice; -1: SLUICE_CUDA_GRAPH's

// Layers a segment holds (a tick each); SLUICE_CUDA_GRAPH_LAYERS=0: one graph a step.
int ticks_from_env() {
  const char* e = std::getenv("SLUICE_CUDA_GRAPH_LAYERS");
  const int layers = e ? std::atoi(e) : 8;
  return std::max(layers, 0);
}
}  // namespace

StepGraph::StepGraph(cudaStream_t s)
    : stream_(s),
      ticks_per_segment_(ticks_from_env()),
      kept_(static_cast<size_t>(kMaxOwners * (kMaxTokens + 1) * kMaxSegments)),
      rest_(static_cast<size_t>(kMaxOwners * (kMaxTokens + 1)), 0),
      builds_in_row_(static_cast<size_t>(kMaxOwners * (kMaxTokens + 1)), 0) {}

StepGraph::~StepGraph() {
  if (recording_) {  // not reached by the backend (its steps end), but a capture must not outlive its stream
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
  }
  for (Kept& k : kept_)
    if (k.exec) cudaGraphExecDestroy(k.exec);
}

bool StepGraph::enabled() {
  if (const int set = g_enabled.load(std::memory_order_relaxed); set >= 0) return set == 1;
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_CUDA_GRAPH");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

void StepGraph::set_enabled(bool on) { g_enabled.store(on ? 1 : 0, std::memory_order_relaxed); }

void StepGraph::begin(int64_t n_tok, const void* who) {
  if (in_step_) end();  // the last step did not end (it failed part way)
  if (!enabled() || n_tok < 1 || n_tok > kMaxTokens) return;
  auto at = static_cast<size_t>(std::find(owners_.begin(), owners_.end(), who) - owners_.begin());
  if (at == owners_.size() && owners_.size() < static_cast<size_t>(kMaxOwners)) owners_.push_back(who);
  owner_ = std::min(static_cast<int>(at), kMaxOwners - 1);  // past kMaxOwners: the last one's
  n_tok_ = n_tok;
  if (int& rest = rest_[size_index()]; rest > 0) {
    --rest;
    ++counts_.resting;
    return;
  }
  in_step_ = true;
  settled_early_ = false;
  step_built_ = false;
  segment_ = 0;
  ++counts_.steps;
  start_capture();
}

void StepGraph::start_capture() {
  SLUICE_CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  recording_ = true;
  ticks_ = 0;
}

void StepGraph::tick() {
  if (!recording_ || ticks_per_segment_ == 0 || ++ticks_ <= ticks_per_segment_) return;
  launch_recording();  // this segment runs while the next is recorded
  ++segment_;
  start_capture();
  ticks_ = 1;  // the layer that ticked is the new segment's
}

void StepGraph::settle() {
  if (!recording_) return;
  settled_early_ = true;
  launch_recording();
}

void StepGraph::launch_recording() {
  recording_ = false;
  cudaGraph_t g = nullptr;
  if (const cudaError_t e = cudaStreamEndCapture(stream_, &g); e != cudaSuccess) {
    // The recorded work is lost: a call the capture forbids was made without settle() first.
    std::fprintf(stderr,
                 "sluice: a decode step's CUDA graph could not be recorded (%s: %s); SLUICE_CUDA_GRAPH=0 runs "
                 "without graphs\n",
                 cudaGetErrorName(e), cudaGetErrorString(e));
    std::abort();
  }
  size_t n_nodes = 0;
  SLUICE_CUDA_OK(cudaGraphGetNodes(g, nullptr, &n_nodes));
  if (n_nodes == 0) {  // nothing was enqueued
    SLUICE_CUDA_OK(cudaGraphDestroy(g));
    return;
  }
  Kept& k = kept(segment_);
  bool updated = false;
  if (k.exec) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(k.exec, g, &info) == cudaSuccess) {
      updated = true;
    } else {
      (void)cudaGetLastError();  // the shape changed: not an error of the step's work
      SLUICE_CUDA_OK(cudaGraphExecDestroy(k.exec));
      k.exec = nullptr;
    }
  }
  if (!updated) {
    SLUICE_CUDA_OK(cudaGraphInstantiate(&k.exec, g, 0));
    step_built_ = true;
  }
  ++(updated ? counts_.updated : counts_.built);
  SLUICE_CUDA_OK(cudaGraphDestroy(g));
  SLUICE_CUDA_OK(cudaGraphLaunch(k.exec, stream_));
  for (Listener* l : listeners_) l->launched(stream_);
}

void StepGraph::end() {
  if (!in_step_) return;
  in_step_ = false;
  if (recording_) launch_recording();  // the step's last segment
  if (settled_early_) ++counts_.partial;
  // A size whose steps keep building graphs rests: building costs more than it saves.
  int& in_row = builds_in_row_[size_index()];
  in_row = step_built_ ? in_row + 1 : 0;
  if (in_row > kBuildsBeforeRest) {
    in_row = 0;
    rest_[size_index()] = kRestSteps;
  }
}

std::string StepGraph::summary() const {
  const Counts& c = counts_;
  if (c.steps == 0) return "";
  std::string s = fmt::format("decode steps as CUDA graphs: {} in {} launches ({} built, {} updated in place",
                              c.steps, c.built + c.updated, c.built, c.updated);
  if (c.partial > 0) s += fmt::format(", {} only up to a wait", c.partial);
  if (c.resting > 0) s += fmt::format(", {} run without while their shape kept changing", c.resting);
  return s + ")";
}

}  // namespace sluice::cuda
