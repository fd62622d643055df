// Test helper: counts heap allocations while enabled, for tests that the
// per-token hot path allocates nothing.
//
// It replaces the global operator new and delete of the test binary: include
// it from exactly one source file of a binary (a second one fails to link).
//
//   g_allocations = 0;
//   g_counting = true;
//   ... the calls that must not allocate ...
//   g_counting = false;
//   EXPECT_EQ(g_allocations.load(), 0);
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

// The replacements pair malloc with free by design; gcc, inlining them into a
// test, takes the pair for a mismatch (-Wmismatched-new-delete).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice::testing {
inline std::atomic<bool> g_counting{false};
inline std::atomic<int64_t> g_allocations{0};
}  // namespace sluice::testing

void* operator new(std::size_t n) {
  if (sluice::testing::g_counting.load(std::memory_order_relaxed)) sluice::testing::g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (sluice::testing::g_counting.load(std::memory_order_relaxed)) sluice::testing::g_allocations.fetch_add(1);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
