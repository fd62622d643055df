// Test helpers for the format fuzz tests: a deterministic RNG, byte mutations,
// a map of where a valid GGUF header keeps its fields, and a tracker of the
// largest single heap allocation (defined in gguf_fuzz_test.cpp, which replaces
// the global operator new of the test binary).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/test_data.h"

namespace sluice::testing {

// No single allocation may exceed this while parsing a file of a few MB.
constexpr size_t kMaxAllocation = 64u << 20;

// Largest single operator-new request since the last reset.
size_t max_allocation();
void reset_max_allocation();

// The bytes of the file at `path` (empty if it cannot be read).
inline std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// A fixture over the bytes of one real-model file (file_). load() reads it, or
// skips the test when the file is absent; SetUp then returns (IsSkipped()).
class RealFileTest : public ::testing::Test {
 protected:
  void load(const std::string& path) {
    if (!path_exists(path)) GTEST_SKIP() << "real-model data not found at " << path;
    file_ = slurp(path);
  }
  std::vector<uint8_t> file_;
};

// splitmix64: deterministic on every platform, unlike std distributions.
class FuzzRng {
 public:
  explicit FuzzRng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }

 private:
  uint64_t state_;
};

// 64-bit values that break naive size arithmetic.
inline uint64_t nasty_u64(FuzzRng* rng, uint64_t file_size) {
  const uint64_t kValues[] = {0,
                              1,
                              0xffffffffffffffffull,
                              0x8000000000000000ull,
                              0x7fffffffffffffffull,
                              0x4000000000000000ull,
                              0x100000000ull,
                              0xffffffffull,
                              file_size,
                              file_size - 1,
                              file_size + 1,
                              file_size / 8,
                              0x1000000000000000ull - 1};
  const uint64_t pick = rng->below(std::size(kValues) + 1);
  return pick < std::size(kValues) ? kValues[pick] : rng->next();
}

// One random mutation of bytes [begin, end) of `b` (bit flip, special byte, or a
// u64 overwrite). Records the original bytes in `undo` as (offset, byte).
inline void mutate_bytes(FuzzRng* rng, std::vector<uint8_t>* b, size_t begin, size_t end,
                         std::vector<std::pair<size_t, uint8_t>>* undo) {
  auto set = [&](size_t at, uint8_t v) {
    if (at >= b->size()) return;
    undo->emplace_back(at, (*b)[at]);
    (*b)[at] = v;
  };
  const size_t at = begin + rng->below(end - begin);
  switch (rng->below(4)) {
    case 0: set(at, static_cast<uint8_t>((*b)[at] ^ (1u << rng->below(8)))); break;
    case 1: {
      const uint8_t kBytes[] = {0x00, 0xff, 0x7f, 0x80};
      set(at, kBytes[rng->below(4)]);
      break;
    }
    case 2: {
      const uint64_t v = nasty_u64(rng, b->size());
      for (size_t k = 0; k < 8; ++k) set(at + k, static_cast<uint8_t>(v >> (8 * k)));
      break;
    }
    default: set(at, static_cast<uint8_t>(rng->next())); break;
  }
}

inline void undo_mutations(std::vector<uint8_t>* b, std::vector<std::pair<size_t, uint8_t>>* undo) {
  for (auto it = undo->rbegin(); it != undo->rend(); ++it) (*b)[it->first] = it->second;
  undo->clear();
}

// Where the fields of a valid GGUF v2/v3 header are (offsets into the file).
struct GgufFieldMap {
  std::vector<size_t> u64_fields;      // counts, string/array lengths, dims, offsets
  std::vector<size_t> tensor_types;    // u32 ggml type of each tensor
  std::vector<size_t> tensor_offsets;  // u64 data offset of each tensor
  std::vector<size_t> tensor_dims;     // u64 ne[0] of each tensor
  size_t header_end = 0;
};

inline GgufFieldMap map_gguf_fields(const std::vector<uint8_t>& b) {
  GgufFieldMap m;
  size_t pos = 8;
  auto u32 = [&]() {
    uint32_t v;
    std::memcpy(&v, b.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto u64 = [&](bool record = true) {
    uint64_t v;
    if (record) m.u64_fields.push_back(pos);
    std::memcpy(&v, b.data() + pos, 8);
    pos += 8;
    return v;
  };
  auto str = [&]() { pos += u64(); };
  auto scalar_size = [](uint32_t t) -> size_t {
    const size_t kSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? kSizes[t] : 0;
  };
  std::function<void(uint32_t)> value = [&](uint32_t t) {
    if (t == 8) return str();
    if (t == 9) {
      const uint32_t et = u32();
      const uint64_t n = u64();
      if (et != 8 && et != 9) {
        pos += n * scalar_size(et);
        return;
      }
      for (uint64_t i = 0; i < n; ++i) value(et);
      return;
    }
    pos += scalar_size(t);
  };
  const uint64_t n_tensors = u64();
  const uint64_t n_kv = u64();
  for (uint64_t i = 0; i < n_kv; ++i) {
    str();
    value(u32());
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    str();
    const uint32_t n_dims = u32();
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (d == 0) m.tensor_dims.push_back(pos);
      u64();
    }
    m.tensor_types.push_back(pos);
    u32();
    m.tensor_offsets.push_back(pos);
    u64();
  }
  m.header_end = pos;
  return m;
}

}  // namespace sluice::testing
