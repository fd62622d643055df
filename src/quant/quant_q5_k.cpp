#include "quant/quant_q5_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kSubBlock = 32;                     // elements per sub-block
constexpr int kNumSubBlocks = kQK_K / kSubBlock;  // 8
constexpr int kQuantMax = 31;                     // 5-bit quants
constexpr int kScaleMax = 63;                     // 6-bit scales and mins

// Candidate inverse scales per sub-block: (31 - 0.5 + 0.1 i) / range, i = 0..15.
constexpr float kSearchRmin = -0.5f;
constexpr float kSearchRdelta = 0.1f;
constexpr int kSearchSteps = 15;

inline void sub_block_scale_min(const BlockQ5_K& b, int s, float* scale, float* min) {
  uint8_t sc = 0, m = 0;
  q4_k_scale_min(b.scales, s, &sc, &m);
  *scale = f16_to_f32(b.d) * static_cast<float>(sc);
  *min = f16_to_f32(b.dmin) * static_cast<float>(m);
}

void quantize_block(const float* x, BlockQ5_K* out) {
  uint8_t q[kQK_K];
  uint8_t q_tmp[kSubBlock];
  float weights[kSubBlock];
  float scales[kNumSubBlocks], mins[kNumSubBlocks];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < kNumSubBlocks; ++s) {
    const float* xs = x + s * kSubBlock;
    // Weight by the sub-block's RMS plus each element's magnitude (as Q4_K).
    float sum_x2 = 0.0f;
    for (int l = 0; l < kSubBlock; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / kSubBlock);
    for (int l = 0; l < kSubBlock; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[s] = search_scale_min(kSubBlock, kQuantMax, xs, weights, q + s * kSubBlock, q_tmp, &mins[s],
                                 kSearchRmin, kSearchRdelta, kSearchSteps);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
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
  for (int s = 0; s < kNumSubBlocks; ++s) {
    float scale = 0.0f, min = 0.0f;
    sub_block_scale_min(*out, s, &scale, &min);
    if (scale == 0.0f) continue;  // every quant decodes to -min; keep the search's
    for (int l = 0; l < kSubBlock; ++l) {
      const int e = s * kSubBlock + l;
      q[e] = static_cast<uint8_t>(
          std::clamp(static_cast<int>(std::lrintf((x[e] + min) / scale)), 0, kQuantMax));
    }
  }
  // Pack (see blocks_more.h): element 64c + 32k + l -> nibble k of qs[32c + l],
  // fifth bit -> bit 2c + k of qh[l].
  std::memset(out->qh, 0, sizeof(out->qh));
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      out->qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      out->qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

}  // namespace

void dequantize_row_q5_k(const BlockQ5_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int s = 0; s < kNumSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      sub_block_scale_min(blocks[b], s, &scale, &min);
      for (int l = 0; l < kSubBlock; ++l) {
        const int e = s * kSubBlock + l;
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
