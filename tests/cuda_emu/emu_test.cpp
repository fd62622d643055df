// The CUDA emulator's own semantics (README.md beside this file): barriers and
// shuffles across a block's fibers, mma.sync's fragment layout against a plain
// matrix product, the 16-bit float conversions, launch and allocation errors,
// and device memory that host code cannot touch. Built in emulator builds only
// (test_cuda_emu); the kernels are written as the CUDA sources are, launched
// through the call the launch rewrite produces.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

// Per block: each warp's sum by shuffles, then the block's through shared memory.
__global__ void block_sums(const float* x, float* warp_out, float* block_out) {
  __shared__ float part[32];
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) part[warp] = v, warp_out[blockIdx.x * 32 + warp] = v;
  __syncthreads();
  if (t == 0) {
    float s = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x) / 32; ++w) s += part[w];
    block_out[blockIdx.x] = s;
  }
}

// out[t] = lane (lane + k) % 32's value, then (with width 8) lane k's of its group of 8.
__global__ void broadcasts(const int* x, int k, int* out, int* out8) {
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  out[t] = __shfl_sync(0xffffffffu, x[t], (lane + k) % 32);
  out8[t] = __shfl_sync(0xffffffffu, x[t], k, 8);
}

TEST(CudaEmulator, ShuffleFromALaneReadsThatLanesValueInItsWarpAndSegment) {
  constexpr int kThreads = 64, kShift = 5;
  std::vector<int> x(kThreads);
  for (int i = 0; i < kThreads; ++i) x[static_cast<size_t>(i)] = 1000 + 7 * i;
  int *dx, *d_out, *d_out8;
  ASSERT_EQ(cudaMalloc(&dx, kThreads * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, kThreads * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out8, kThreads * 4), cudaSuccess);
  cudaMemcpy(dx, x.data(), kThreads * 4, cudaMemcpyHostToDevice);
  ::sluice_emu::launch(1, kThreads)([&](auto&&... a) { broadcasts(a...); }, dx, kShift, d_out, d_out8);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> out(kThreads), out8(kThreads);
  cudaMemcpy(out.data(), d_out, kThreads * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(out8.data(), d_out8, kThreads * 4, cudaMemcpyDeviceToHost);
  for (int t = 0; t < kThreads; ++t) {
    const int warp0 = t / 32 * 32;
    EXPECT_EQ(out[static_cast<size_t>(t)], x[static_cast<size_t>(warp0 + (t % 32 + kShift) % 32)]) << t;
    EXPECT_EQ(out8[static_cast<size_t>(t)], x[static_cast<size_t>(t / 8 * 8 + kShift)]) << t;
  }
  cudaFree(dx), cudaFree(d_out), cudaFree(d_out8);
}

TEST(CudaEmulator, ShufflesAndBarriersAcrossABlocksThreads) {
  constexpr int kBlocks = 3, kThreads = 96;
  std::vector<float> x(kBlocks * kThreads);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f + 0.25f * static_cast<float>(i % 3);
  float *dx, *dw, *db;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dw, kBlocks * 32 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, kBlocks * 4), cudaSuccess);
  cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
  ::sluice_emu::launch(kBlocks, kThreads)([&](auto&&... a) { block_sums(a...); }, dx, dw, db);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> w(kBlocks * 32), b(kBlocks);
  cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(b.data(), db, b.size() * 4, cudaMemcpyDeviceToHost);
  for (int blk = 0; blk < kBlocks; ++blk) {
    float total = 0.0f;
    for (int warp = 0; warp < kThreads / 32; ++warp) {
      float s = 0.0f;
      for (int l = 0; l < 32; ++l) s += x[static_cast<size_t>(blk * kThreads + warp * 32 + l)];
      EXPECT_FLOAT_EQ(w[static_cast<size_t>(blk * 32 + warp)], s) << "block " << blk << " warp " << warp;
      total += s;
    }
    EXPECT_FLOAT_EQ(b[static_cast<size_t>(blk)], total) << "block " << blk;
  }
  cudaFree(dx), cudaFree(dw), cudaFree(db);
}

// One m16n8k16 tile: every lane loads its fragments as the PTX manual lays
// them out (a: A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]; b:
// B[2t..][g], B[2t+8..][g]; c/d: D[g][2t..], D[g+8][2t..]), lane = 4g + t.
__global__ void mma_tile(const __half* a, const __half* b, float* d) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  auto pair = [](const __half* p, int i0, int i1) {
    return static_cast<uint32_t>(__half_as_ushort(p[i0])) | static_cast<uint32_t>(__half_as_ushort(p[i1])) << 16;
  };
  const uint32_t af[4] = {pair(a, g * 16 + 2 * t, g * 16 + 2 * t + 1),
                          pair(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1),
                          pair(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9),
                          pair(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9)};
  // b is B[k][n] row major, 16 x 8.
  const uint32_t b0 = pair(b, (2 * t) * 8 + g, (2 * t + 1) * 8 + g);
  const uint32_t b1 = pair(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g);
  float c[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  ::sluice_emu::mma_m16n8k16_f16_f32(c, af, b0, b1);
  d[g * 8 + 2 * t] = c[0], d[g * 8 + 2 * t + 1] = c[1];
  d[(g + 8) * 8 + 2 * t] = c[2], d[(g + 8) * 8 + 2 * t + 1] = c[3];
}

TEST(CudaEmulator, MmaTileIsTheMatrixProductInPtxFragmentLayout) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<__half> a(16 * 16), b(16 * 8);
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = 0.125f * static_cast<float>(small(rng)), a[i] = __float2half(af[i]);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = 0.25f * static_cast<float>(small(rng)), b[i] = __float2half(bf[i]);
  __half *da, *db;
  float* dd;
  cudaMalloc(&da, a.size() * 2), cudaMalloc(&db, b.size() * 2), cudaMalloc(&dd, 16 * 8 * 4);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  ::sluice_emu::launch(1, 32)([&](auto&&... p) { mma_tile(p...); }, da, db, dd);
  std::vector<float> d(16 * 8);
  cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = 1.0f;  // c's initial value
      for (int k = 0; k < 16; ++k) want += af[static_cast<size_t>(r * 16 + k)] * bf[static_cast<size_t>(k * 8 + n)];
      EXPECT_EQ(d[static_cast<size_t>(r * 8 + n)], want) << "D[" << r << "][" << n << "]";  // exact: small dyadics
    }
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

// One m16n8k32 int8 tile in the PTX manual's layout (a: A[g][4t..4t+3],
// A[g+8][4t..], A[g][4t+16..], A[g+8][4t+16..]; b: B[4t..][g], B[4t+16..][g]).
__global__ void mma_tile_s8(const int8_t* a, const int8_t* b, int32_t* d) {
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  auto word = [](const int8_t* p, int i0, int step) {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w |= static_cast<uint32_t>(static_cast<uint8_t>(p[i0 + i * step])) << (8 * i);
    return w;
  };
  const uint32_t af[4] = {word(a, g * 32 + 4 * t, 1), word(a, (g + 8) * 32 + 4 * t, 1), word(a, g * 32 + 4 * t + 16, 1),
                          word(a, (g + 8) * 32 + 4 * t + 16, 1)};
  // b is B[k][n] row major, 32 x 8.
  const uint32_t b0 = word(b, (4 * t) * 8 + g, 8), b1 = word(b, (4 * t + 16) * 8 + g, 8);
  int32_t c[4] = {3, 3, 3, 3};
  ::sluice_emu::mma_m16n8k32_s8_s32(c, af, b0, b1);
  d[g * 8 + 2 * t] = c[0], d[g * 8 + 2 * t + 1] = c[1];
  d[(g + 8) * 8 + 2 * t] = c[2], d[(g + 8) * 8 + 2 * t + 1] = c[3];
}

TEST(CudaEmulator, Int8MmaTileIsTheMatrixProductInPtxFragmentLayout) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> any(-128, 127);
  std::vector<int8_t> a(16 * 32), b(32 * 8);
  for (int8_t& v : a) v = static_cast<int8_t>(any(rng));
  for (int8_t& v : b) v = static_cast<int8_t>(any(rng));
  int8_t *da, *db;
  int32_t* dd;
  cudaMalloc(&da, a.size()), cudaMalloc(&db, b.size()), cudaMalloc(&dd, 16 * 8 * 4);
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  ::sluice_emu::launch(1, 32)([&](auto&&... p) { mma_tile_s8(p...); }, da, db, dd);
  std::vector<int32_t> d(16 * 8);
  cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      int32_t want = 3;
      for (int k = 0; k < 32; ++k) want += a[static_cast<size_t>(r * 32 + k)] * b[static_cast<size_t>(k * 8 + n)];
      EXPECT_EQ(d[static_cast<size_t>(r * 8 + n)], want) << "D[" << r << "][" << n << "]";
    }
  cudaFree(da), cudaFree(db), cudaFree(dd);
}

TEST(CudaEmulator, SixteenBitFloatsRoundToNearestEven) {
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f)), 0x3c00);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(0.1f)), 0x2e66);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65504.0f)), 0x7bff);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65520.0f)), 0x7c00);       // the tie above the largest: infinity
  EXPECT_EQ(__half_as_ushort(__float2half_rn(std::ldexp(1.0f, -24))), 0x0001);  // the smallest subnormal
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f + std::ldexp(1.0f, -11))), 0x3c00);  // tie: to even
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f + 3 * std::ldexp(1.0f, -11))), 0x3c02);
  EXPECT_TRUE(std::isnan(__half2float(__float2half_rn(NAN))));
  EXPECT_EQ(__half2float(__ushort_as_half(0xc000)), -2.0f);
  EXPECT_EQ(__half2float(__ushort_as_half(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(1.0f + std::ldexp(1.0f, -8))), 0x3f80);  // tie: to even
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(1.0f + 3 * std::ldexp(1.0f, -8))), 0x3f82);
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16_rn(NAN))));
}

__global__ void nothing() {}

TEST(CudaEmulator, BadLaunchesAndAllocationsFailAsOnADevice) {
  ::sluice_emu::launch(1, 0)([&](auto&&... p) { nothing(p...); });
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ::sluice_emu::launch(1, 2048)([&](auto&&... p) { nothing(p...); });
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudaFree(reinterpret_cast<void*>(&free_bytes)), cudaErrorInvalidValue);  // not device memory
}

TEST(CudaEmulatorDeathTest, HostCodeTouchingDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_DEATH({ p[3] = 1.0f; }, "host code touched device memory");
  float v = 2.0f;
  EXPECT_EQ(cudaMemcpy(p + 3, &v, 4, cudaMemcpyHostToDevice), cudaSuccess);  // through the API: fine
  cudaFree(p);
}

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer a device allocation is followed by a poisoned redzone:
// thread 16 reads one float past a 16-float buffer.
__global__ void read_past(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }

TEST(CudaEmulatorDeathTest, AKernelReadingPastItsBufferIsReportedUnderAsan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float *x = nullptr, *y = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 16 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, 17 * 4), cudaSuccess);
  EXPECT_DEATH(::sluice_emu::launch(1, 17)([&](auto&&... p) { read_past(p...); }, x, y), "use-after-poison");
  cudaFree(x), cudaFree(y);
}
#endif

// Half a warp at a shuffle, the other half at a block barrier: each waits for
// the other for ever (a hang on a GPU); the emulator stops and says so.
__global__ void split_warp() {
  float v = 1.0f;
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else __syncthreads();
}

TEST(CudaEmulatorDeathTest, ThreadsWaitingForEachOtherAreReportedNotAHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(::sluice_emu::launch(1, 32)([&](auto&&... p) { split_warp(p...); }), "deadlock");
}

}  // namespace
