// Every weight matrix in device memory (the resident arena, the ring's slots,
// host views' copies, expert slots) starts 256-byte aligned, as the kernels'
// 16-byte loads and cuBLASLt's tiles want.
#pragma once

#include <cstddef>

namespace sluice::cuda {

inline constexpr size_t kWeightAlign = 256;
constexpr size_t weight_aligned(size_t n) { return (n + kWeightAlign - 1) / kWeightAlign * kWeightAlign; }

}  // namespace sluice::cuda
