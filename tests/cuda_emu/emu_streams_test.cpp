// The emulator's deferred streams (emu_streams.cpp, SLUICE_EMU_DEFER): work
// waits until something needs it, so unordered work goes wrong here as it
// could on a GPU, and ordered work (an event waited for, a stream
// synchronized) comes out right. Each test sets the mode itself.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "emu_state.h"

namespace {

using sluice_emu::DeferMode;

__global__ void fill(float* y, float v) { y[threadIdx.x] = v; }
__global__ void copy_floats(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }

constexpr int kN = 8;

struct Mode {
  explicit Mode(DeferMode m) { sluice_emu::set_defer_mode(m); }
  ~Mode() { sluice_emu::set_defer_mode(DeferMode::kNone); }
};

struct Device {
  float* p = nullptr;
  Device() {
    EXPECT_EQ(cudaMalloc(&p, kN * 4), cudaSuccess);
    std::vector<float> z(kN, 0.0f);
    cudaMemcpy(p, z.data(), kN * 4, cudaMemcpyHostToDevice);
  }
  ~Device() { cudaFree(p); }
  float first() const {
    std::vector<float> h(kN);
    cudaMemcpy(h.data(), p, kN * 4, cudaMemcpyDeviceToHost);
    return h[0];
  }
};

struct Pinned {
  float* p = nullptr;
  Pinned() { EXPECT_EQ(cudaMallocHost(&p, kN * 4), cudaSuccess); }
  ~Pinned() { cudaFreeHost(p); }
  void set(float v) {
    for (int i = 0; i < kN; ++i) p[i] = v;
  }
};

struct Streams {
  cudaStream_t a = nullptr, b = nullptr;
  Streams() {
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  }
  ~Streams() {
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }
};

// A copy from pinned memory reads it when the stream gets to it: the host
// overwriting it before then changes what lands; waiting for the copy first
// (an event) keeps it.
TEST(CudaEmulatorStreams, LazyCopiesReadPinnedMemoryWhenTheyRun) {
  Mode mode(DeferMode::kLazy);
  Streams s;
  Pinned h;
  Device d;
  h.set(1.0f);
  cudaMemcpyAsync(d.p, h.p, kN * 4, cudaMemcpyHostToDevice, s.a);
  h.set(2.0f);  // too early
  cudaStreamSynchronize(s.a);
  EXPECT_EQ(d.first(), 2.0f);

  cudaEvent_t done = nullptr;
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  h.set(3.0f);
  cudaMemcpyAsync(d.p, h.p, kN * 4, cudaMemcpyHostToDevice, s.a);
  cudaEventRecord(done, s.a);
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);  // a first poll finds it pending
  cudaEventSynchronize(done);
  h.set(4.0f);
  EXPECT_EQ(d.first(), 3.0f);
  cudaEventDestroy(done);
}

// A pageable source is staged at the call, as the runtime does.
TEST(CudaEmulatorStreams, APageableSourceIsReadAtTheCall) {
  Mode mode(DeferMode::kLazy);
  Streams s;
  Device d;
  std::vector<float> h(kN, 5.0f);
  cudaMemcpyAsync(d.p, h.data(), kN * 4, cudaMemcpyHostToDevice, s.a);
  h.assign(kN, 6.0f);
  cudaStreamSynchronize(s.a);
  EXPECT_EQ(d.first(), 5.0f);
}

// One stream's kernel reading what another's writes: without an event it
// reads the old bytes (lazy: the writer has not run when the reader's stream
// is synchronized); with one, the new.
TEST(CudaEmulatorStreams, LazyWorkOfAnotherStreamRunsOnlyWhenWaitedFor) {
  Mode mode(DeferMode::kLazy);
  Streams s;
  Device x, y;
  ::sluice_emu::launch(1, kN, 0, s.a)([=](auto&&... p) { fill(p...); }, x.p, 7.0f);
  ::sluice_emu::launch(1, kN, 0, s.b)([=](auto&&... p) { copy_floats(p...); }, x.p, y.p);
  cudaStreamSynchronize(s.b);
  EXPECT_EQ(y.first(), 0.0f) << "the writer ran first without being waited for";
  cudaDeviceSynchronize();

  cudaEvent_t written = nullptr;
  cudaEventCreateWithFlags(&written, cudaEventDisableTiming);
  ::sluice_emu::launch(1, kN, 0, s.a)([=](auto&&... p) { fill(p...); }, x.p, 8.0f);
  cudaEventRecord(written, s.a);
  cudaStreamWaitEvent(s.b, written, 0);
  ::sluice_emu::launch(1, kN, 0, s.b)([=](auto&&... p) { copy_floats(p...); }, x.p, y.p);
  cudaStreamSynchronize(s.b);
  EXPECT_EQ(y.first(), 8.0f);
  cudaEventDestroy(written);
}

// Copies mode: kernels run at once, copies only when needed, so a kernel that
// reads a copy's bytes without waiting for it reads the old ones.
TEST(CudaEmulatorStreams, CopiesModeRunsKernelsBeforeTheCopiesTheyDoNotWaitFor) {
  Mode mode(DeferMode::kCopies);
  Streams s;
  Pinned h;
  Device x, y;
  h.set(9.0f);
  cudaMemcpyAsync(x.p, h.p, kN * 4, cudaMemcpyHostToDevice, s.a);
  ::sluice_emu::launch(1, kN, 0, s.b)([=](auto&&... p) { copy_floats(p...); }, x.p, y.p);
  EXPECT_EQ(y.first(), 0.0f);
  cudaDeviceSynchronize();
  EXPECT_EQ(x.first(), 9.0f);

  cudaEvent_t copied = nullptr;
  cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
  h.set(10.0f);
  cudaMemcpyAsync(x.p, h.p, kN * 4, cudaMemcpyHostToDevice, s.a);
  cudaEventRecord(copied, s.a);
  cudaStreamWaitEvent(s.b, copied, 0);
  ::sluice_emu::launch(1, kN, 0, s.b)([=](auto&&... p) { copy_floats(p...); }, x.p, y.p);
  EXPECT_EQ(y.first(), 10.0f);
  cudaEventDestroy(copied);
}

}  // namespace
