#include "quant/blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kQ6SubBlock = 16;                     // elements per sub-block
constexpr int kQ6NumSubBlocks = kQK_K / kQ6SubBlock;  // 16
constexpr int kQuantOffset = 32;                  // q in [0, 63] stores q - 32
constexpr int kQ6SearchSteps = 9;                   // +-9 candidate steps of 0.1

void quantize_block(const float* x, BlockQ6_K* out) {
  uint8_t q[kQK_K];               // [256] chosen quants 0..63, element order
  float scales[kQ6NumSubBlocks];    // float scale per sub-block (may be negative)
  float max_scale = 0.0f;         // signed scale of largest magnitude
  float max_abs_scale = 0.0f;
  for (int s = 0; s < kQ6NumSubBlocks; ++s) {
    scales[s] = search_scale_symmetric(kQ6SubBlock, kQuantOffset, x + s * kQ6SubBlock,
                                       q + s * kQ6SubBlock, kQ6SearchSteps);
    if (std::fabs(scales[s]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(out, 0, sizeof(*out));  // all zero: d = 0, every value decodes to 0
    return;
  }

  // 8-bit scales against the f16 d; the largest-magnitude scale maps to -128.
  const float inv_scale = -128.0f / max_scale;
  out->d = f32_to_f16(1.0f / inv_scale);
  for (int s = 0; s < kQ6NumSubBlocks; ++s) {
    const int sc = static_cast<int>(std::lrintf(inv_scale * scales[s]));
    out->scales[s] = static_cast<int8_t>(std::clamp(sc, -128, 127));
  }

  // Re-fit the quants to the scales the block actually stores.
  const float d = f16_to_f32(out->d);
  for (int s = 0; s < kQ6NumSubBlocks; ++s) {
    const float scale = d * static_cast<float>(out->scales[s]);
    if (scale == 0.0f) continue;  // every quant decodes to 0; keep the search's
    for (int l = 0; l < kQ6SubBlock; ++l) {
      const int e = s * kQ6SubBlock + l;
      const int v = std::clamp(static_cast<int>(std::lrintf(x[e] / scale)), -kQuantOffset, kQuantOffset - 1);
      q[e] = static_cast<uint8_t>(v + kQuantOffset);
    }
  }

  // Pack (see blocks.h): per half h, element 128h + 32k + l goes to
  // ql[64h + l + 32 (k & 1)] (low nibble for k < 2, high for k >= 2) and
  // qh[32h + l] bits 2k..2k+1.
  for (int h = 0; h < 2; ++h) {
    const uint8_t* qh_src = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = qh_src[l], q1 = qh_src[l + 32], q2 = qh_src[l + 64], q3 = qh_src[l + 96];
      out->ql[64 * h + l] = static_cast<uint8_t>((q0 & 15) | ((q2 & 15) << 4));
      out->ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
      out->qh[32 * h + l] =
          static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
}

}  // namespace

void dequantize_row_q6_k(const BlockQ6_K* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    float* y = dst + b * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {
      const float scale = d * static_cast<float>(blocks[b].scales[e / kQ6SubBlock]);
      y[e] = scale * static_cast<float>(q6_k_quant(blocks[b], e) - kQuantOffset);
    }
  }
}

void quantize_row_q6_k(const float* src, BlockQ6_K* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) quantize_block(src + b * kQK_K, &blocks[b]);
}

}  // namespace sluice
