#include "quant/blocks_more.h"

#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_scale_min.h"

namespace sluice {
namespace {

// 5-bit quants; candidate inverse scales (31 - 0.5 + 0.1 i) / range, i = 0..15.
constexpr KScaleMinSearch kQ5KSearch{.quant_max = 31, .rmin = -0.5f, .rdelta = 0.1f, .steps = 15};

inline void sub_block_scale_min(const BlockQ5_K& b, int s, float* scale, float* min) {
  k_sub_block_scale_min(b.d, b.dmin, b.scales, s, scale, min);
}

void quantize_block(const float* x, BlockQ5_K* out) {
  KScaleMinFit fit;
  fit_k_scale_min(x, kQ5KSearch, &fit);
  out->d = fit.d;
  out->dmin = fit.dmin;
  std::memcpy(out->scales, fit.scales, sizeof(out->scales));
  // Pack (see blocks_more.h): element 64c + 32k + l -> nibble k of qs[32c + l],
  // fifth bit -> bit 2c + k of qh[l].
  std::memset(out->qh, 0, sizeof(out->qh));
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = fit.q[64 * c + l], hi = fit.q[64 * c + 32 + l];
      out->qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      out->qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

}  // namespace

void dequantize_row_q5_k(const BlockQ5_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int s = 0; s < kScaleMinSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kScaleMinSubBlock; ++l) {
        const int e = s * kScaleMinSubBlock + l;
        dst[b * kQK_K + e] = scale * static_cast<float>(q5_k_quant(blocks[b], e)) - min;
      }
    }
  }
}

void quantize_row_q5_k(const float* src, BlockQ5_K* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block(src + b * kQK_K, &blocks[b]);
}

}  // namespace sluice
