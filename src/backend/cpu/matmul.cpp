#include "backend/cpu/matmul.h"

#include <array>
#include <mutex>

#include "base/check.h"

namespace sluice::cpu {
namespace {

constexpr std::array<DType, 7> kTypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                         DType::kQ4_0, DType::kQ4_K, DType::kQ6_K};

MatmulKernel lookup(DType type, Isa isa) {
  for (int level = static_cast<int>(isa); level >= 0; --level) {
    const Isa at = static_cast<Isa>(level);
    const bool is_float = type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
    MatmulKernel k = is_float ? float_matmul_kernel(type, at) : quant_matmul_kernel(type, at);
    if (k.rows) return k;
  }
  return MatmulKernel{};
}

}  // namespace

const MatmulKernel& matmul_kernel(DType type, Isa isa) {
  // [isa][type index], filled once.
  static const auto table = [] {
    std::array<std::array<MatmulKernel, kTypes.size()>, 3> t{};
    for (int i = 0; i < 3; ++i)
      for (size_t j = 0; j < kTypes.size(); ++j) t[i][j] = lookup(kTypes[j], static_cast<Isa>(i));
    return t;
  }();
  for (size_t j = 0; j < kTypes.size(); ++j) {
    if (kTypes[j] == type) {
      const MatmulKernel& k = table[static_cast<size_t>(isa)][j];
      CHECK(k.rows != nullptr);
      return k;
    }
  }
  CHECK(false && "matmul_kernel: unsupported type");
  return table[0][0];
}

}  // namespace sluice::cpu
