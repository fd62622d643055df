// The emulator's device memory: one reserved address range that host code
// cannot touch. Allocations are taken from it first fit; it is readable and
// writable only while the emulator itself works on device memory (a launch, a
// copy, a fill) and inaccessible otherwise, so host code that dereferences a
// device pointer faults here as it would with a GPU, and the fault is
// reported as such. Under AddressSanitizer each allocation is followed by a
// poisoned redzone and freed memory is poisoned, so a kernel reading past a
// buffer or after its free is reported too.
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "emu_state.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define EMU_POISON(p, n) __asan_poison_memory_region((p), (n))
#define EMU_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define EMU_POISON(p, n) ((void)(p), (void)(n))
#define EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace sluice_emu {
namespace {

constexpr size_t kAlign = 256, kRedzone = 256, kHuge = size_t{2} << 20;

struct Arena {
  std::mutex mu;
  char* base = nullptr;
  size_t size = 0;       // reserved
  size_t extent = 0;     // high-water mark: [base, base + extent) has been handed out
  std::map<size_t, size_t> free_ranges;  // offset -> bytes, past `extent` implicit
  std::map<size_t, size_t> used;         // offset -> bytes asked (before rounding and redzone)
  std::map<char*, size_t> vmm;           // mapped, accessible driver-API ranges
  int open = 0;                          // DeviceAccess scopes alive, all threads
  struct sigaction previous {};
};

Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: the process may still launch while exiting
  return *a;
}

// The range that faults, for the report.
bool in_device_memory(const Arena& a, const char* p) {
  if (p >= a.base && p < a.base + a.size) return true;
  for (const auto& [start, n] : a.vmm)
    if (p >= start && p < start + n) return true;
  return false;
}

void on_fault(int sig, siginfo_t* info, void* ctx) {
  Arena& a = arena();
  const char* addr = static_cast<const char*>(info->si_addr);
  if (a.base != nullptr && in_device_memory(a, addr)) {
    char line[160];
    const int n = std::snprintf(line, sizeof(line),
                                "sluice CUDA emulator: host code touched device memory at %p; on a GPU this "
                                "faults too. Where:\n",
                                info->si_addr);
    if (n > 0) (void)!write(2, line, static_cast<size_t>(n));
    void* frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
    std::abort();
  }
  // Not ours: whoever handled it before (AddressSanitizer's report, or the default).
  if (a.previous.sa_flags & SA_SIGINFO) {
    a.previous.sa_sigaction(sig, info, ctx);
  } else if (a.previous.sa_handler != SIG_DFL && a.previous.sa_handler != SIG_IGN) {
    a.previous.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

// Reserves the range once (twice the emulated capacity, for fragmentation).
void init(Arena& a) {
  if (a.base) return;
  a.size = 2 * device_capacity();
  void* p = mmap(nullptr, a.size + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "sluice CUDA emulator: cannot reserve %zu bytes of addresses for device memory\n", a.size);
    std::abort();
  }
  a.base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge);
  // Huge pages where the kernel gives them: a protection change then costs
  // one entry per 2 MiB instead of 512, and it happens at every launch.
  madvise(a.base, a.size, MADV_HUGEPAGE);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &a.previous);
}

// SLUICE_EMU_GUARD=0 leaves device memory open to host code throughout.
bool guarded() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_EMU_GUARD");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

void protect(Arena& a, int prot) {
  if (!guarded()) prot = PROT_READ | PROT_WRITE;
  // Whole huge pages (the range beyond the extent is reserved and unused).
  if (a.extent > 0) mprotect(a.base, std::min(a.size, (a.extent + kHuge - 1) / kHuge * kHuge), prot);
  for (const auto& [start, n] : a.vmm) mprotect(start, n, prot);
}

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

DeviceAccess::DeviceAccess() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.open++ == 0) protect(a, PROT_READ | PROT_WRITE);
}

DeviceAccess::~DeviceAccess() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (--a.open == 0) protect(a, PROT_NONE);
}

void* device_alloc(size_t bytes) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  init(a);
  const size_t need = round_up(bytes == 0 ? 1 : bytes) + kRedzone;
  size_t at = a.extent;
  for (auto it = a.free_ranges.begin(); it != a.free_ranges.end(); ++it) {
    if (it->second < need) continue;
    at = it->first;
    if (it->second > need) a.free_ranges[at + need] = it->second - need;
    a.free_ranges.erase(it);
    break;
  }
  if (at == a.extent) {
    if (a.extent + need > a.size) return nullptr;
    a.extent += need;
    protect(a, a.open > 0 ? PROT_READ | PROT_WRITE : PROT_NONE);
  }
  a.used[at] = bytes;
  char* p = a.base + at;
  EMU_UNPOISON(p, bytes);
  EMU_POISON(p + bytes, need - bytes);
  return p;
}

bool device_free(void* ptr) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  char* p = static_cast<char*>(ptr);
  if (!a.base || p < a.base || p >= a.base + a.extent) return false;
  const size_t at = static_cast<size_t>(p - a.base);
  auto it = a.used.find(at);
  if (it == a.used.end()) return false;
  const size_t need = round_up(it->second == 0 ? 1 : it->second) + kRedzone;
  a.used.erase(it);
  EMU_POISON(p, need);  // a kernel reading it after the free is reported
  if (need >= (size_t{1} << 20)) madvise(p, need, MADV_DONTNEED);
  // Coalesce with the neighbours.
  size_t start = at, len = need;
  auto next = a.free_ranges.lower_bound(at);
  if (next != a.free_ranges.end() && next->first == at + len) {
    len += next->second;
    next = a.free_ranges.erase(next);
  }
  if (next != a.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      a.free_ranges.erase(prev);
    }
  }
  a.free_ranges[start] = len;
  return true;
}

bool is_device_pointer(const void* p) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.base != nullptr && in_device_memory(a, static_cast<const char*>(p));
}

size_t device_alloc_size(const void* ptr) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  const char* p = static_cast<const char*>(ptr);
  if (!a.base || p < a.base) return 0;
  auto it = a.used.find(static_cast<size_t>(p - a.base));
  return it == a.used.end() ? 0 : it->second;
}

void device_range_mapped(void* p, size_t bytes, bool accessible) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  init(a);  // the fault handler knows the range
  if (accessible) {
    a.vmm[static_cast<char*>(p)] = bytes;
    mprotect(p, bytes, a.open > 0 || !guarded() ? PROT_READ | PROT_WRITE : PROT_NONE);
  } else {
    a.vmm.erase(static_cast<char*>(p));
  }
}

}  // namespace sluice_emu

// For the stand-in libcublasLt (loaded with dlopen; the executables export
// this symbol): open device memory around its matmul.
extern "C" void sluice_emu_device_access(int open) {
  sluice_emu::Arena& a = sluice_emu::arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (open ? a.open++ == 0 : --a.open == 0) sluice_emu::protect(a, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}
