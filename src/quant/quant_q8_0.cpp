#include "quant/blocks.h"

#include <cmath>

#include "base/check.h"
#include "base/half.h"

namespace sluice {

void dequantize_row_q8_0(const BlockQ8_0* blocks, float* dst, int64_t n) {
  CHECK(n % kQK8_0 == 0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int i = 0; i < kQK8_0; ++i) dst[b * kQK8_0 + i] = static_cast<float>(blocks[b].qs[i]) * d;
  }
}

void quantize_row_q8_0(const float* src, BlockQ8_0* blocks, int64_t n) {
  CHECK(n % kQK8_0 == 0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* x = src + b * kQK8_0;
    float amax = 0.0f;
    for (int i = 0; i < kQK8_0; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = f32_to_f16(d);
    // roundf: ties away from zero, as the reference quantizer does.
    for (int i = 0; i < kQK8_0; ++i) blocks[b].qs[i] = static_cast<int8_t>(std::roundf(x[i] * inv_d));
  }
}

}  // namespace sluice
