#include "quant/blocks.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/half.h"

namespace sluice {
namespace {

// Quant of element i (0..31) of a Q4_0 block, 0..15 (see blocks.h).
inline int q4_0_quant(const BlockQ4_0& b, int i) {
  return i < kQK4_0 / 2 ? (b.qs[i] & 15) : (b.qs[i - kQK4_0 / 2] >> 4);
}

}  // namespace

void dequantize_row_q4_0(const BlockQ4_0* blocks, float* dst, int64_t n) {
  CHECK(n % kQK4_0 == 0);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int i = 0; i < kQK4_0; ++i) {
      dst[b * kQK4_0 + i] = static_cast<float>(q4_0_quant(blocks[b], i) - 8) * d;
    }
  }
}

void quantize_row_q4_0(const float* src, BlockQ4_0* blocks, int64_t n) {
  CHECK(n % kQK4_0 == 0);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* x = src + b * kQK4_0;
    float amax = 0.0f;
    float max = 0.0f;  // signed value of largest magnitude (first one on ties)
    for (int i = 0; i < kQK4_0; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    // The largest-magnitude value maps to q = 0 (-8 * d); the other side reaches +7.
    const float d = max / -8.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // + 8.5 then truncation: round half up in the shifted domain.
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * inv_d + 8.5f)));
      const int hi =
          std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kQK4_0 / 2] * inv_d + 8.5f)));
      blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace sluice
