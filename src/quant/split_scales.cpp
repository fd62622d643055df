#include "quant/split_scales.h"

#include <cstring>

#include "base/check.h"

namespace sluice {

// Q4_0 and Q8_0 blocks are [f16 d][quants]: the geometry from their rows.
bool split_scales_takes(DType type, int64_t n_in) {
  return (type == DType::kQ4_0 || type == DType::kQ8_0) && n_in > 0 && n_in % dtype_traits(type).block_size == 0;
}

int64_t split_quant_bytes(DType type) { return dtype_traits(type).block_bytes - 2; }

void split_scales(DType type, const uint8_t* rows, int64_t n_out, int64_t n_in, uint8_t* out) {
  CHECK(split_scales_takes(type, n_in));
  const int64_t qb = split_quant_bytes(type), n = n_out * (n_in / dtype_traits(type).block_size);
  uint8_t* scales = out + n * qb;
  for (int64_t i = 0; i < n; ++i) {  // block i of the matrix, rows one after the other
    const uint8_t* blk = rows + i * (qb + 2);
    std::memcpy(scales + 2 * i, blk, 2);
    std::memcpy(out + i * qb, blk + 2, static_cast<size_t>(qb));
  }
}

void join_scales(DType type, const uint8_t* split, int64_t n_out, int64_t n_in, uint8_t* rows) {
  CHECK(split_scales_takes(type, n_in));
  const int64_t qb = split_quant_bytes(type), n = n_out * (n_in / dtype_traits(type).block_size);
  const uint8_t* scales = split + n * qb;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t* blk = rows + i * (qb + 2);
    std::memcpy(blk, scales + 2 * i, 2);
    std::memcpy(blk + 2, split + i * qb, static_cast<size_t>(qb));
  }
}

}  // namespace sluice
