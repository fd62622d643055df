#include "quant/blocks.h"

#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_scale_min.h"

namespace sluice {
namespace {

// 4-bit quants; candidate inverse scales (15 - 1 + 0.1 i) / range, i = 0..20.
constexpr KScaleMinSearch kQ4KSearch{.quant_max = 15, .rmin = -1.0f, .rdelta = 0.1f, .steps = 20};

inline void sub_block_scale_min(const BlockQ4_K& b, int s, float* scale, float* min) {
  k_sub_block_scale_min(b.d, b.dmin, b.scales, s, scale, min);
}

void quantize_block(const float* x, BlockQ4_K* out) {
  KScaleMinFit fit;
  fit_k_scale_min(x, kQ4KSearch, &fit);
  out->d = fit.d;
  out->dmin = fit.dmin;
  std::memcpy(out->scales, fit.scales, sizeof(out->scales));
  // Pack: byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l (high).
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      out->qs[32 * c + l] = static_cast<uint8_t>(fit.q[64 * c + l] | (fit.q[64 * c + 32 + l] << 4));
    }
  }
}

}  // namespace

void dequantize_row_q4_k(const BlockQ4_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    float* y = dst + b * kQK_K;
    for (int s = 0; s < kScaleMinSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kScaleMinSubBlock; ++l) {
        const int e = s * kScaleMinSubBlock + l;
        y[e] = scale * static_cast<float>(q4_k_quant(blocks[b], e)) - min;
      }
    }
  }
}

void quantize_row_q4_k(const float* src, BlockQ4_K* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block(src + b * kQK_K, &blocks[b]);
}

float dot_row_q4_k(const BlockQ4_K* blocks, const float* x, int64_t n) {
  CHECK(n % kQK_K == 0);
  float total = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float partial = 0.0f;
    for (int s = 0; s < kScaleMinSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kScaleMinSubBlock; ++l) {
        const int e = s * kScaleMinSubBlock + l;
        partial += (scale * static_cast<float>(q4_k_quant(blocks[b], e)) - min) * xb[e];
      }
    }
    total += partial;
  }
  return total;
}

}  // namespace sluice
