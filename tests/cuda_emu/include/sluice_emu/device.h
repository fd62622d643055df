// The CUDA device language on the CPU, for sluice's CUDA emulator (see
// tests/cuda_emu/README.md): the qualifiers, built-in indices, vector types and
// intrinsics sluice's kernels use, and the launch that runs a grid.
//
// A launch runs its blocks one after another on the calling thread; a block's
// threads are fibers (emu_runtime.cpp) that switch only where CUDA threads
// synchronise: __syncthreads(), and the warp-wide exchanges (__shfl_xor_sync,
// __shfl_sync, the mma emulation). Between those points a thread runs alone, so a kernel
// that would race on a GPU (a missing barrier) computes here as if run in one
// order: the emulator finds wrong indexing, unwritten outputs and reads out of
// bounds (with AddressSanitizer), not races.
#pragma once

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// One copy per block: blocks run one at a time per host thread, and a host
// thread's fibers share its thread_locals.
#define __shared__ static thread_local

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(4) char4 { signed char x, y, z, w; };
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

constexpr int warpSize = 32;

namespace sluice_emu {

void sync_block();                                  // __syncthreads()
uint64_t exchange_warp(uint64_t mine, int src_lane);  // every lane deposits `mine`, gets src_lane's
int lane_id();
// One m16n8k16 tile product over the warp: c (4 floats a lane) += a b, a and b
// F16 pairs in mma.sync's fragment layout.
void mma_m16n8k16_f16_f32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
// One m16n8k32 tile product over the warp: c (4 ints a lane) += a b, a and b
// signed bytes (4 a word) in mma.sync's fragment layout.
void mma_m16n8k32_s8_s32(int32_t* c, const uint32_t* a, uint32_t b0, uint32_t b1);

// Whether a launch of this shape is valid (as the device would judge it); a
// bad one is recorded as the error cudaGetLastError() returns.
bool launch_ok(dim3 grid, dim3 block);
// Runs body(ctx) as every thread of the grid.
void run_grid(dim3 grid, dim3 block, size_t dynamic_smem, void (*body)(void*), void* ctx);
// Runs `grid` on `stream` (a cudaStream_t; null: the legacy stream): at once,
// or under SLUICE_EMU_DEFER when the stream gets to it (emu_streams.cpp).
void submit_launch(void* stream, std::function<void()> grid);

// kernel<<<grid, block, smem, stream>>>(args) is rewritten (rewrite_launches.py) as
//   launch(grid, block, smem, stream)([&](auto&&... a) { kernel(a...); }, args)
// so that the kernel's template arguments are deduced from the arguments, as
// nvcc deduces them. The arguments are evaluated once, at the launch, and kept
// with the grid until it runs; each thread's call copies them into the
// kernel's parameters.
struct Launch {
  dim3 grid, block;
  size_t smem;
  void* stream;
  template <class F, class... A>
  void operator()(F call, A&&... args) const {
    if (!launch_ok(grid, block)) return;
    using Args = std::tuple<std::decay_t<A>...>;
    submit_launch(stream, [g = grid, b = block, smem = smem, call, a = Args(std::forward<A>(args)...)]() mutable {
      struct Ctx {
        F* call;
        Args* args;
      } ctx{&call, &a};
      run_grid(g, b, smem, [](void* p) {
        auto* c = static_cast<Ctx*>(p);
        std::apply(*c->call, *c->args);
      }, &ctx);
    });
  }
};
template <class S = void*>
Launch launch(dim3 grid, dim3 block, size_t smem = 0, S stream = {}) {
  void* s = nullptr;
  if constexpr (std::is_pointer_v<S>) s = static_cast<void*>(stream);
  return {grid, block, smem, s};
}

}  // namespace sluice_emu

// The running fiber's indices: the scheduler sets them before it switches to
// a fiber, the only point at which the running thread changes.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

inline void __syncthreads() { ::sluice_emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::sluice_emu::exchange_warp(0, 0); }

namespace sluice_emu {
// Lane src's v, to this lane: a warp-wide exchange (every lane of the warp takes part).
template <class T>
inline T exchange_value(T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = exchange_warp(bits, src);
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}
}  // namespace sluice_emu

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  const int lane = ::sluice_emu::lane_id();
  int src = lane ^ lane_mask;
  if ((src / width) != (lane / width)) src = lane;  // outside the segment: its own value
  return ::sluice_emu::exchange_value(v, src);
}

// Lane src_lane's v (of this lane's segment of `width` lanes).
template <class T>
inline T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
  const int lane = ::sluice_emu::lane_id();
  return ::sluice_emu::exchange_value(v, lane / width * width + src_lane % width);
}

template <class T>
inline T __ldg(const T* p) { return *p; }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
// The _rn operations are never fused into an fma (the emulator builds with
// -ffp-contract=off, and these are plain functions besides).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int __float2int_rn(float f) { return static_cast<int>(std::nearbyint(f)); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// Byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x bytes 0-3).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = uint64_t{x} | uint64_t{y} << 32;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
  return c;
}
// Atomics: real ones (launches may run on several host threads); old value returned.
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
inline T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// A launch's blocks run one after another on the calling thread here; the
// fence orders its writes for other host threads (a copy queue's pump).
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }

// CUDA's min and max take any two arithmetic types (the usual conversions).
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
