#include "quant/blocks_more.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kLowSubBlock = 16;                     // elements per sub-block
constexpr int kLowNumSubBlocks = kQK_K / kLowSubBlock;  // 16

// Q2_K search grid: inverse scales (3 - 0.5 + 0.1 i) / range, i = 0..15.
constexpr float kQ2SearchRmin = -0.5f;
constexpr float kQ2SearchRdelta = 0.1f;
constexpr int kQ2SearchSteps = 15;
constexpr int kQ3SymmetricSteps = 9;

inline int round_clamp(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lrintf(v)), lo, hi); }

void quantize_block_q2_k(const float* x, BlockQ2_K* out) {
  uint8_t q[kQK_K];
  uint8_t q_tmp[kLowSubBlock];
  float weights[kLowSubBlock];
  float scales[kLowNumSubBlocks], mins[kLowNumSubBlocks];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < kLowNumSubBlocks; ++s) {
    const float* xs = x + s * kLowSubBlock;
    // Weight by magnitude: large values matter most in a dot product.
    for (int l = 0; l < kLowSubBlock; ++l) weights[l] = std::fabs(xs[l]);
    scales[s] = search_scale_min(kLowSubBlock, 3, xs, weights, q + s * kLowSubBlock, q_tmp, &mins[s], kQ2SearchRmin,
                                 kQ2SearchRdelta, kQ2SearchSteps);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }
  // 4-bit scales and mins relative to the two f16 super-block scales.
  const float inv_scale = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 15.0f / max_min : 0.0f;
  for (int s = 0; s < kLowNumSubBlocks; ++s) {
    const int sc = round_clamp(inv_scale * scales[s], 0, 15);
    const int m = round_clamp(inv_min * mins[s], 0, 15);
    out->scales[s] = static_cast<uint8_t>(sc | (m << 4));
  }
  out->d = f32_to_f16(max_scale / 15.0f);
  out->dmin = f32_to_f16(max_min / 15.0f);
  // Re-fit the quants to the scales the block stores.
  const float d = f16_to_f32(out->d), dmin = f16_to_f32(out->dmin);
  for (int s = 0; s < kLowNumSubBlocks; ++s) {
    const float scale = d * static_cast<float>(out->scales[s] & 15);
    const float min = dmin * static_cast<float>(out->scales[s] >> 4);
    if (scale == 0.0f) continue;  // every quant decodes to -min; keep the search's
    for (int l = 0; l < kLowSubBlock; ++l) {
      const int e = s * kLowSubBlock + l;
      q[e] = static_cast<uint8_t>(round_clamp((x[e] + min) / scale, 0, 3));
    }
  }
  // Pack: element 128h + 32j + l -> bits 2j of qs[32h + l].
  std::memset(out->qs, 0, sizeof(out->qs));
  for (int e = 0; e < kQK_K; ++e)
    out->qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q[e] << (2 * (e % 128 / 32)));
}

void quantize_block_q3_k(const float* x, BlockQ3_K* out) {
  uint8_t q[kQK_K];  // 0..7, value q - 4
  float scales[kLowNumSubBlocks];
  float max_scale = 0.0f, max_abs_scale = 0.0f;  // signed scale of largest magnitude
  for (int s = 0; s < kLowNumSubBlocks; ++s) {
    scales[s] = search_scale_symmetric(kLowSubBlock, 4, x + s * kLowSubBlock, q + s * kLowSubBlock, kQ3SymmetricSteps);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  std::memset(out, 0, sizeof(*out));
  if (max_abs_scale < kGroupMaxEps) {
    uint8_t zero[kLowNumSubBlocks];
    std::fill(zero, zero + kLowNumSubBlocks, uint8_t{32});  // scale 0: every value decodes to 0
    q3_k_pack_scales(zero, out->scales);
    return;
  }
  // 6-bit signed scales against the f16 d; the largest-magnitude one maps to -32.
  const float inv_scale = -32.0f / max_scale;
  out->d = f32_to_f16(1.0f / inv_scale);
  uint8_t sc6[kLowNumSubBlocks];
  for (int s = 0; s < kLowNumSubBlocks; ++s) sc6[s] = static_cast<uint8_t>(round_clamp(inv_scale * scales[s], -32, 31) + 32);
  q3_k_pack_scales(sc6, out->scales);
  // Re-fit the quants to the scales the block stores.
  const float d = f16_to_f32(out->d);
  for (int s = 0; s < kLowNumSubBlocks; ++s) {
    const float scale = d * static_cast<float>(sc6[s] - 32);
    if (scale == 0.0f) continue;
    for (int l = 0; l < kLowSubBlock; ++l) {
      const int e = s * kLowSubBlock + l;
      q[e] = static_cast<uint8_t>(round_clamp(x[e] / scale, -4, 3) + 4);
    }
  }
  // Pack: bits 0..1 of element 128h + 32j + l -> bits 2j of qs[32h + l];
  // bit 2 -> bit 4h + j of hmask[l].
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, j = e % 128 / 32, l = e % 32;
    out->qs[32 * h + l] |= static_cast<uint8_t>((q[e] & 3) << (2 * j));
    out->hmask[l] |= static_cast<uint8_t>((q[e] >> 2) << (4 * h + j));
  }
}

}  // namespace

void dequantize_row_q2_k(const BlockQ2_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    for (int s = 0; s < kLowNumSubBlocks; ++s) {
      const float dl = d * static_cast<float>(blk.scales[s] & 15);
      const float ml = dmin * static_cast<float>(blk.scales[s] >> 4);
      for (int l = 0; l < kLowSubBlock; ++l) {
        const int e = s * kLowSubBlock + l;
        dst[b * kQK_K + e] = dl * static_cast<float>(q2_k_quant(blk, e)) - ml;
      }
    }
  }
}

void dequantize_row_q3_k(const BlockQ3_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& blk = blocks[b];
    const float d = f16_to_f32(blk.d);
    for (int s = 0; s < kLowNumSubBlocks; ++s) {
      const float dl = d * static_cast<float>(q3_k_scale(blk.scales, s) - 32);
      for (int l = 0; l < kLowSubBlock; ++l) {
        const int e = s * kLowSubBlock + l;
        dst[b * kQK_K + e] = dl * static_cast<float>(q3_k_quant(blk, e) - 4);
      }
    }
  }
}

void quantize_row_q2_k(const float* src, BlockQ2_K* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block_q2_k(src + b * kQK_K, &blocks[b]);
}

void quantize_row_q3_k(const float* src, BlockQ3_K* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block_q3_k(src + b * kQK_K, &blocks[b]);
}

}  // namespace sluice
