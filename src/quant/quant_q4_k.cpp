#include "quant/quant_q4_k.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kSubBlock = 32;                    // elements per sub-block
constexpr int kNumSubBlocks = kQK_K / kSubBlock;  // 8
constexpr int kQuantMax = 15;                     // 4-bit quants
constexpr int kScaleMax = 63;                     // 6-bit scales and mins

// Candidate inverse scales tried per sub-block: (15 - 1 + 0.1 i) / range, i = 0..20.
constexpr float kSearchRmin = -1.0f;
constexpr float kSearchRdelta = 0.1f;
constexpr int kSearchSteps = 20;

// Float scale d * sc[s] and offset dmin * m[s] of sub-block s, as dequantization uses them.
inline void sub_block_scale_min(const BlockQ4_K& b, int s, float* scale, float* min) {
  uint8_t sc = 0, m = 0;
  q4_k_scale_min(b.scales, s, &sc, &m);
  *scale = f16_to_f32(b.d) * static_cast<float>(sc);
  *min = f16_to_f32(b.dmin) * static_cast<float>(m);
}

void quantize_block(const float* x, BlockQ4_K* out) {
  uint8_t q[kQK_K];              // [256] chosen quants, element order
  uint8_t q_tmp[kSubBlock];      // scratch for the search
  float weights[kSubBlock];
  float scales[kNumSubBlocks];   // float scale per sub-block
  float mins[kNumSubBlocks];     // float offset (>= 0, subtracted) per sub-block
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int s = 0; s < kNumSubBlocks; ++s) {
    const float* xs = x + s * kSubBlock;
    // Weight each element by the sub-block's RMS plus its own magnitude, so large
    // values (which matter most in a dot product) are fitted more closely.
    float sum_x2 = 0.0f;
    for (int l = 0; l < kSubBlock; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / kSubBlock);
    for (int l = 0; l < kSubBlock; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[s] = search_scale_min(kSubBlock, kQuantMax, xs, weights, q + s * kSubBlock, q_tmp,
                                 &mins[s], kSearchRmin, kSearchRdelta, kSearchSteps);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }

  // 6-bit scales and mins relative to the two f16 super-block scales.
  const float inv_scale = max_scale > 0.0f ? kScaleMax / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? kScaleMax / max_min : 0.0f;
  uint8_t sc6[kNumSubBlocks], m6[kNumSubBlocks];
  for (int s = 0; s < kNumSubBlocks; ++s) {
    sc6[s] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lrintf(inv_scale * scales[s])), 0, kScaleMax));
    m6[s] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lrintf(inv_min * mins[s])), 0, kScaleMax));
  }
  q4_k_pack_scales(sc6, m6, out->scales);
  out->d = f32_to_f16(max_scale / kScaleMax);
  out->dmin = f32_to_f16(max_min / kScaleMax);

  // Re-fit the quants to the scales the block actually stores.
  for (int s = 0; s < kNumSubBlocks; ++s) {
    float scale = 0.0f, min = 0.0f;
    sub_block_scale_min(*out, s, &scale, &min);
    if (scale == 0.0f) continue;  // every quant decodes to -min; keep the search's
    for (int l = 0; l < kSubBlock; ++l) {
      const int e = s * kSubBlock + l;
      q[e] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lrintf((x[e] + min) / scale)), 0, kQuantMax));
    }
  }
  // Pack: byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l (high).
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      out->qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
  }
}

}  // namespace

void dequantize_row_q4_k(const BlockQ4_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    float* y = dst + b * kQK_K;
    for (int s = 0; s < kNumSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kSubBlock; ++l) {
        const int e = s * kSubBlock + l;
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
    for (int s = 0; s < kNumSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kSubBlock; ++l) {
        const int e = s * kSubBlock + l;
        partial += (scale * static_cast<float>(q4_k_quant(blocks[b], e)) - min) * xb[e];
      }
    }
    total += partial;
  }
  return total;
}

}  // namespace sluice
