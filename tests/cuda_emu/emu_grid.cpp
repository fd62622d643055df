// The emulator's launches: a grid's blocks one after another, a block's
// threads as fibers that switch only at the points where CUDA threads wait
// for each other (sluice_emu/device.h).
#include <pthread.h>
#include <sys/mman.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SLUICE_EMU_ASAN 1
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_runtime.h"
#include "emu_state.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

// Saves the callee-saved registers on this stack, stores its pointer at
// *save_sp, and resumes the context whose stack pointer is load_sp (x86-64
// System V; the floating-point control words are never changed here, so they
// are not switched). No system call, unlike swapcontext, which would dominate
// a kernel's run time.
extern "C" void sluice_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl sluice_emu_switch
  .type sluice_emu_switch, @function
sluice_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size sluice_emu_switch, .-sluice_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace sluice_emu {

namespace {


// Each fiber's stack, below an inaccessible guard page (an overflow faults).
constexpr size_t kStackBytes = size_t{64} << 10, kGuardBytes = 4096, kStackStride = kStackBytes + kGuardBytes;

enum class Wait { kNone, kBlock, kWarp };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
  char* stack = nullptr;  // its lowest usable byte (kStackBytes of them)
  uint3 thread_idx;
  int lane = 0, warp = 0;
  int exchanges = 0;  // warp exchanges this thread took part in (its slot set: the parity)
  bool done = false;
  Wait wait = Wait::kNone;
  uint64_t gen = 0;  // the barrier generation it waits to see pass
};

struct Warp {
  int live = 0, arrived = 0;
  uint64_t gen = 0;
  // What each lane deposits for an exchange, in two sets used in turn: a lane
  // writes set p of exchange k only after every lane passed exchange k-1's
  // barrier, so every read of exchange k-2 (the last to use set p) is done.
  uint64_t slot[2][32][4];
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0, arrived = 0;
  uint64_t gen = 0;
  void* sched_sp = nullptr;  // run_block's, while a fiber runs
  const void* sched_stack = nullptr;  // run_block's thread's stack (AddressSanitizer is told of each switch)
  size_t sched_stack_size = 0;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
};

thread_local Block* t_block = nullptr;
thread_local Fiber* t_fiber = nullptr;
thread_local char* t_stacks = nullptr;
thread_local size_t t_stack_count = 0;

char* stacks_for(size_t n) {
  if (n > t_stack_count) {
    if (t_stacks) munmap(t_stacks, t_stack_count * kStackStride);
    void* p = mmap(nullptr, n * kStackStride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "sluice CUDA emulator: cannot map %zu fiber stacks\n", n);
      std::abort();
    }
    t_stacks = static_cast<char*>(p);
    t_stack_count = n;
    for (size_t i = 0; i < n; ++i) mprotect(t_stacks + i * kStackStride, kGuardBytes, PROT_NONE);
  }
  return t_stacks;
}

void release_if_complete(Block& b, Warp& w) {
  if (w.live > 0 && w.arrived == w.live) {
    w.arrived = 0;
    ++w.gen;
  }
  if (b.live > 0 && b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
  }
}

bool runnable(const Block& b, const Fiber& f) {
  if (f.done) return false;
  switch (f.wait) {
    case Wait::kNone: return true;
    case Wait::kBlock: return b.gen != f.gen;
    case Wait::kWarp: return b.warps[static_cast<size_t>(f.warp)].gen != f.gen;
  }
  return false;
}

// The first fiber after `from` (in thread order, wrapping round, `from` last)
// that can run; null when none can.
Fiber* next_runnable(Block& b, const Fiber* from) {
  const size_t n = b.fibers.size(), i0 = from ? static_cast<size_t>(from - b.fibers.data()) + 1 : 0;
  for (size_t k = 0; k < n; ++k) {
    Fiber& f = b.fibers[(i0 + k) % n];
    if (runnable(b, f)) return &f;
  }
  return nullptr;
}

// Switches stacks as sluice_emu_switch does, telling AddressSanitizer (when
// built with it) which stack runs next; `ending`: the one left never resumes.
void switch_stack(void** save, void* load_sp, const void* stack, size_t size, bool ending = false) {
#ifdef SLUICE_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(ending ? nullptr : &fake, stack, size);
  sluice_emu_switch(save, load_sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)stack, (void)size, (void)ending;
  sluice_emu_switch(save, load_sp);
#endif
}

// Makes f the running thread (its indices are what the kernel reads).
void enter(Fiber& f) {
  f.wait = Wait::kNone;
  t_fiber = &f;
  threadIdx = f.thread_idx;
}

// Leaves the running fiber (saving its stack pointer at *save) for the next
// that can run, straight from fiber to fiber; back to run_block when none can
// (every thread done, or a deadlock it reports).
void switch_away(void** save, bool ending = false) {
  Block& b = *t_block;
  Fiber* next = next_runnable(b, t_fiber);
  if (next == t_fiber) {  // its own barrier has just opened
    enter(*next);
    return;
  }
  if (next == nullptr) {
    switch_stack(save, b.sched_sp, b.sched_stack, b.sched_stack_size, ending);
    return;
  }
  enter(*next);
  switch_stack(save, next->sp, next->stack, kStackBytes, ending);
}

[[noreturn]] void fiber_entry() {
#ifdef SLUICE_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  Block& b = *t_block;
  b.body(b.ctx);
  Fiber& f = *t_fiber;
  f.done = true;
  --b.live;
  Warp& w = b.warps[static_cast<size_t>(f.warp)];
  --w.live;
  release_if_complete(b, w);  // those waiting at a barrier no longer wait for this thread
  void* unused = nullptr;
  switch_away(&unused, true);
  __builtin_unreachable();
}

// A fresh fiber's stack as sluice_emu_switch leaves one it switched away
// from: six zero registers, then fiber_entry as the return address (16-byte
// aligned, so fiber_entry starts with the stack a call gives).
void* prepare_stack(char* stack) {
#ifdef SLUICE_EMU_ASAN
  // A fiber that ended never returned through its frames: their redzones are
  // still poisoned in the shadow of the stack it leaves to the next.
  __asan_unpoison_memory_region(stack, kStackBytes);
#endif
  auto* top = reinterpret_cast<uint64_t*>(stack + kStackBytes);
  uint64_t* ret = top - 2;
  ret[1] = 0;  // fiber_entry's own return address: it never returns
  ret[0] = reinterpret_cast<uint64_t>(&fiber_entry);
  for (int i = 1; i <= 6; ++i) ret[-i] = 0;
  return ret - 6;
}

void wait_at(Wait kind) {
  Block& b = *t_block;
  Fiber& f = *t_fiber;
  Warp& w = b.warps[static_cast<size_t>(f.warp)];
  f.wait = kind;
  if (kind == Wait::kWarp) {
    f.gen = w.gen;
    ++w.arrived;
  } else {
    f.gen = b.gen;
    ++b.arrived;
  }
  release_if_complete(b, w);
  switch_away(&f.sp);
}

void warp_barrier() { wait_at(Wait::kWarp); }

void run_block(Block& b, dim3 grid, dim3 block, uint3 block_idx) {
  const size_t n = size_t{block.x} * block.y * block.z;
  char* stacks = stacks_for(n);
  b.fibers.resize(n);
  const size_t n_warps = (n + 31) / 32;
  if (b.warps.size() < n_warps) b.warps.resize(n_warps);
  for (size_t w = 0; w < n_warps; ++w) b.warps[w].live = b.warps[w].arrived = 0;
  b.live = static_cast<int>(n);
  b.arrived = 0;
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.thread_idx = {static_cast<unsigned>(i % block.x), static_cast<unsigned>(i / block.x % block.y),
                    static_cast<unsigned>(i / (size_t{block.x} * block.y))};
    f.lane = static_cast<int>(i % 32);
    f.warp = static_cast<int>(i / 32);
    f.exchanges = 0;
    f.done = false;
    f.wait = Wait::kNone;
    f.gen = 0;
    ++b.warps[i / 32].live;
    f.stack = stacks + i * kStackStride + kGuardBytes;
    f.sp = prepare_stack(f.stack);
  }
  blockIdx = block_idx;
  blockDim = block;
  gridDim = grid;
  Fiber& first = b.fibers[0];
  enter(first);
  switch_stack(&b.sched_sp, first.sp, first.stack, kStackBytes);  // back when no thread can run
  if (b.live > 0) {
    std::fprintf(stderr,
                 "sluice CUDA emulator: deadlock in block (%u,%u,%u): %d threads wait at a barrier that "
                 "the others never reach\n",
                 block_idx.x, block_idx.y, block_idx.z, b.live);
    std::abort();
  }
  t_fiber = nullptr;
}

}  // namespace

void sync_block() { wait_at(Wait::kBlock); }

int lane_id() { return t_fiber->lane; }

uint64_t exchange_warp(uint64_t mine, int src_lane) {
  Fiber& f = *t_fiber;
  auto& set = t_block->warps[static_cast<size_t>(f.warp)].slot[f.exchanges++ & 1];
  set[f.lane][0] = mine;
  warp_barrier();
  return set[src_lane & 31][0];
}

// One mma.sync tile over the warp: A row-major 16 x K, B col-major K x 8,
// C/D 16 x 8, lane = 4 g + t, each 32-bit register holding E = K / 8
// elements (the lowest element in the low bits). With half = K / 2: a[0]
// holds A[g][E t .. E t + E - 1], a[1] A[g+8][E t ..], a[2] A[g][half + E t ..],
// a[3] A[g+8][half + E t ..]; b0 holds B[E t ..][g], b1 B[half + E t ..][g];
// c[0..1] are D[g][2t..2t+1], c[2..3] D[g+8][2t..2t+1]. elem(word, i) is
// element i of a word. The sums go in k order, onto c.
template <int K, class T, class Elem>
void mma_tile(T* c, const uint32_t* a, uint32_t b0, uint32_t b1, Elem elem) {
  constexpr int E = K / 8, half = K / 2;
  Fiber& f = *t_fiber;
  auto& set = t_block->warps[static_cast<size_t>(f.warp)].slot[f.exchanges++ & 1];
  const int lane = f.lane;
  set[lane][0] = a[0] | uint64_t{a[1]} << 32;
  set[lane][1] = a[2] | uint64_t{a[3]} << 32;
  set[lane][2] = b0 | uint64_t{b1} << 32;
  warp_barrier();
  auto word = [&](int l, int reg) { return static_cast<uint32_t>(set[l][reg / 2] >> (32 * (reg % 2))); };
  auto A = [&](int r, int k) {
    return elem(word(4 * (r % 8) + (k % half) / E, (r >= 8 ? 1 : 0) + (k >= half ? 2 : 0)), k % E);
  };
  auto B = [&](int k, int n) { return elem(word(4 * n + (k % half) / E, 4 + (k >= half ? 1 : 0)), k % E); };
  const int g = lane / 4, t = lane % 4;
  T out[4];
  for (int i = 0; i < 4; ++i) {
    const int r = g + (i >= 2 ? 8 : 0), n = 2 * t + i % 2;
    T s = c[i];
    for (int k = 0; k < K; ++k) s += A(r, k) * B(k, n);
    out[i] = s;
  }
  for (int i = 0; i < 4; ++i) c[i] = out[i];
}

void mma_m16n8k16_f16_f32(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  mma_tile<16>(c, a, b0, b1, [](uint32_t w, int i) { return f16_bits_to_float(static_cast<uint16_t>(w >> (16 * i))); });
}

void mma_m16n8k32_s8_s32(int32_t* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  mma_tile<32>(c, a, b0, b1, [](uint32_t w, int i) {
    return static_cast<int32_t>(static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * i))));
  });
}

bool launch_ok(dim3 grid, dim3 block) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration);
    return false;
  }
  return true;
}

// This thread's stack (lowest address, size): where switches back to run_block land.
static std::pair<const void*, size_t> thread_stack() {
  thread_local std::pair<const void*, size_t> s = [] {
    pthread_attr_t attr;
    void* low = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &low, &size);
      pthread_attr_destroy(&attr);
    }
    return std::pair<const void*, size_t>(low, size);
  }();
  return s;
}

void run_grid(dim3 grid, dim3 block, size_t, void (*body)(void*), void* ctx) {
  static const bool trace = std::getenv("SLUICE_EMU_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "[emu] grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z, block.x, block.y, block.z);
  DeviceAccess open;  // device memory, for this launch's threads
  Block b;
  b.body = body;
  b.ctx = ctx;
  std::tie(b.sched_stack, b.sched_stack_size) = thread_stack();
  Block* outer = t_block;
  t_block = &b;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) run_block(b, grid, block, {x, y, z});
  t_block = outer;
}

}  // namespace sluice_emu
