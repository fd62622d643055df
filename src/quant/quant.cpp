#include "quant/quant.h"

#include "base/check.h"

namespace sluice {

// Each type's reference functions are in its row (dtype.cpp).
void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  CHECK(n >= 0 && n % t.block_size == 0);
  t.dequantize(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  CHECK(n >= 0 && n % t.block_size == 0);
  t.quantize(src, dst, n);
}

float dot_row(DType type, const void* w, const float* x, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  CHECK(n >= 0 && n % t.block_size == 0);
  return t.dot(w, x, n);
}

size_t quantize_tensor(DType type, const float* src, void* dst, int64_t n_rows,
                       int64_t n_per_row) {
  CHECK(n_rows >= 0 && n_per_row % dtype_traits(type).block_size == 0);
  const size_t row_size = row_bytes(type, n_per_row);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_row(type, src + r * n_per_row, out + static_cast<size_t>(r) * row_size, n_per_row);
  }
  return static_cast<size_t>(n_rows) * row_size;
}

}  // namespace sluice
