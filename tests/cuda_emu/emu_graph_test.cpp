// The emulator's stream capture and graphs (emu_streams.cpp): captured work
// runs at each launch of its graph and not before, an update keeps the
// topology and takes the new parameters, and every call a GPU forbids during
// a capture is refused and invalidates it, so that code recording CUDA graphs
// (sluice's decode steps, cuda_step_graph.h) fails here where it would fail
// on a GPU.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "emu_state.h"

namespace {

__global__ void fill(float* y, float v) { y[threadIdx.x] = v; }

constexpr int kN = 8;

struct Fixture {
  cudaStream_t s = nullptr;
  float* dev = nullptr;
  float* pinned = nullptr;
  Fixture() {
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dev, kN * 4), cudaSuccess);
    EXPECT_EQ(cudaMallocHost(&pinned, kN * 4), cudaSuccess);
    EXPECT_EQ(cudaMemset(dev, 0, kN * 4), cudaSuccess);
  }
  ~Fixture() {
    cudaFreeHost(pinned);
    cudaFree(dev);
    cudaStreamDestroy(s);
  }
  float first() {
    float h[kN];
    EXPECT_EQ(cudaMemcpy(h, dev, kN * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h[0];
  }
  // Ends a capture that a refused call should have invalidated.
  void expect_invalidated() {
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(g, nullptr);
    (void)cudaGetLastError();
  }
};

TEST(EmuGraph, CapturedWorkRunsAtEachLaunchOnlyAndAnUpdateTakesNewArguments) {
  Fixture f;
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(f.s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  for (int i = 0; i < kN; ++i) f.pinned[i] = 2.0f;
  ASSERT_EQ(cudaMemcpyAsync(f.dev, f.pinned, kN * 4, cudaMemcpyHostToDevice, f.s), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  size_t n = 0;
  ASSERT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(f.first(), 0.0f) << "captured work ran at capture";
  for (int i = 0; i < kN; ++i) f.pinned[i] = 3.0f;  // a pinned source is read when the graph runs
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(f.s), cudaSuccess);
  EXPECT_EQ(f.first(), 3.0f);
  cudaGraphDestroy(g);

  // The same topology (one kernel instead of one copy is not: below) with a new argument.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  for (int i = 0; i < kN; ++i) f.pinned[i] = 4.0f;
  ASSERT_EQ(cudaMemcpyAsync(f.dev, f.pinned, kN * 4, cudaMemcpyHostToDevice, f.s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphExecUpdateResultInfo info{};
  ASSERT_EQ(cudaGraphExecUpdate(exec, g, &info), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);  // twice: each launch runs it again
  ASSERT_EQ(cudaStreamSynchronize(f.s), cudaSuccess);
  EXPECT_EQ(f.first(), 4.0f);
  cudaGraphDestroy(g);

  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ::sluice_emu::launch(1, kN, 0, f.s)([=](auto&&... p) { fill(p...); }, f.dev, 5.0f);
  ::sluice_emu::launch(1, kN, 0, f.s)([=](auto&&... p) { fill(p...); }, f.dev, 6.0f);
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphExecUpdate(exec, g, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  (void)cudaGetLastError();
  cudaGraphExecDestroy(exec);
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(f.s), cudaSuccess);
  EXPECT_EQ(f.first(), 6.0f);
  cudaGraphDestroy(g);
  cudaGraphExecDestroy(exec);
}

TEST(EmuGraph, DeferredTheGraphsWorkWaitsForItsStream) {
  sluice_emu::set_defer_mode(sluice_emu::DeferMode::kLazy);
  {
    Fixture f;
    ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(f.dev, f.pinned, kN * 4, cudaMemcpyHostToDevice, f.s), cudaSuccess);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
    for (int i = 0; i < kN; ++i) f.pinned[i] = 7.0f;
    ASSERT_EQ(cudaGraphLaunch(exec, f.s), cudaSuccess);
    for (int i = 0; i < kN; ++i) f.pinned[i] = 8.0f;  // before the stream ran: the copy reads this
    ASSERT_EQ(cudaStreamSynchronize(f.s), cudaSuccess);
    EXPECT_EQ(f.first(), 8.0f);
    cudaGraphDestroy(g);
    cudaGraphExecDestroy(exec);
  }
  sluice_emu::set_defer_mode(sluice_emu::DeferMode::kNone);
}

TEST(EmuGraph, CallsACaptureForbidsAreRefusedAndInvalidateIt) {
  Fixture f;
  cudaEvent_t outside = nullptr, inside = nullptr;
  ASSERT_EQ(cudaEventCreate(&outside), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&inside), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(outside, f.s), cudaSuccess);
  std::vector<float> pageable(kN, 1.0f);

  // Waiting for the captured stream.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(f.s), cudaErrorStreamCaptureUnsupported);
  f.expect_invalidated();
  // An event recorded in the capture: the host cannot wait for it, even after.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(inside, f.s), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(f.s, inside, 0), cudaSuccess);  // the stream's own order: fine
  EXPECT_EQ(cudaEventSynchronize(inside), cudaErrorCapturedEvent);
  EXPECT_EQ(cudaEventQuery(inside), cudaErrorCapturedEvent);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphDestroy(g);
  EXPECT_EQ(cudaEventSynchronize(inside), cudaErrorCapturedEvent);
  (void)cudaGetLastError();
  // Waiting on work outside the capture.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(f.s, outside, 0), cudaErrorStreamCaptureIsolation);
  f.expect_invalidated();
  // A copy of pageable memory.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(f.dev, pageable.data(), kN * 4, cudaMemcpyHostToDevice, f.s),
            cudaErrorStreamCaptureUnsupported);
  f.expect_invalidated();
  // The legacy stream and synchronous calls: they would wait for the capturing stream.
  for (int call = 0; call < 4; ++call) {
    ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cudaError_t e = cudaSuccess;
    if (call == 0) e = cudaMemcpy(f.dev, f.pinned, kN * 4, cudaMemcpyHostToDevice);
    if (call == 1) e = cudaDeviceSynchronize();
    if (call == 2) e = cudaMemsetAsync(f.dev, 0, kN * 4, nullptr);
    if (call == 3) e = cudaStreamSynchronize(nullptr);
    EXPECT_EQ(e, cudaErrorStreamCaptureImplicit) << "call " << call;
    f.expect_invalidated();
  }
  // Allocation is not refused (relaxed mode); a graph never launched never runs.
  ASSERT_EQ(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ::sluice_emu::launch(1, kN, 0, f.s)([=](auto&&... p) { fill(p...); }, f.dev, 9.0f);
  float* more = nullptr;
  EXPECT_EQ(cudaMalloc(&more, 64), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(f.s, &g), cudaSuccess);
  cudaGraphDestroy(g);
  EXPECT_EQ(f.first(), 0.0f);
  cudaFree(more);
  cudaEventDestroy(outside);
  cudaEventDestroy(inside);
}

}  // namespace
