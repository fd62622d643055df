#include "quant/blocks_more.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kGroup = 32;          // elements per scale
constexpr int kIq4SearchSteps = 10;    // candidate scales on each side of the naive one
constexpr float kSearchDelta = 0.02f;  // relative spacing of candidate scales

// Least-squares fit of x ~= scale * kIq4NlValues[idx] for one group; writes the
// indices of the best candidate and returns its scale (0 for an all-zero group).
float fit_group(const float* x, uint8_t* idx) {
  float amax = 0.0f, max = 0.0f;  // max: the signed value of largest magnitude
  for (int i = 0; i < kGroup; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(idx, idx + kGroup, static_cast<uint8_t>(iq4_nearest_index(0.0f)));
    return 0.0f;
  }
  // The naive scale maps the largest magnitude onto the codebook's end (-127);
  // candidates scale it by 1 + delta * step. Error of a candidate's assignment
  // with its best scale: sum x^2 - sumqx^2 / sumq2, so keep the largest sumqx^2 / sumq2.
  float best_scale = 0.0f, best_gain = -1.0f;
  uint8_t tmp[kGroup];
  for (int step = -kIq4SearchSteps; step <= kIq4SearchSteps; ++step) {
    const float scale = max / static_cast<float>(kIq4NlValues[0]) * (1.0f + kSearchDelta * static_cast<float>(step));
    const float inv = 1.0f / scale;
    float sumqx = 0.0f, sumq2 = 0.0f;
    for (int i = 0; i < kGroup; ++i) {
      tmp[i] = static_cast<uint8_t>(iq4_nearest_index(x[i] * inv));
      const float v = kIq4NlValues[tmp[i]];
      sumqx += v * x[i];
      sumq2 += v * v;
    }
    if (sumq2 <= 0.0f) continue;
    const float gain = sumqx * sumqx / sumq2;
    if (gain > best_gain) {
      best_gain = gain;
      best_scale = sumqx / sumq2;
      std::copy(tmp, tmp + kGroup, idx);
    }
  }
  return best_scale;
}

// Indices of x for a stored scale; keeps idx as it is when scale == 0.
void refit(const float* x, float scale, uint8_t* idx) {
  if (scale == 0.0f) return;
  const float inv = 1.0f / scale;
  for (int i = 0; i < kGroup; ++i) idx[i] = static_cast<uint8_t>(iq4_nearest_index(x[i] * inv));
}

void pack_nibbles(const uint8_t* idx, uint8_t* qs) {
  for (int j = 0; j < kGroup / 2; ++j) qs[j] = static_cast<uint8_t>(idx[j] | (idx[j + 16] << 4));
}

}  // namespace

int iq4_nearest_index(float v) {
  int best = 0;
  float best_err = std::fabs(v - kIq4NlValues[0]);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(v - kIq4NlValues[i]);
    if (err < best_err) {
      best_err = err;
      best = i;
    }
  }
  return best;
}

void dequantize_row_iq4_nl(const BlockIq4Nl* blocks, float* dst, int64_t n) {
  CHECK(n % kQK4_NL == 0);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int i = 0; i < kGroup; ++i)
      dst[b * kGroup + i] = d * static_cast<float>(kIq4NlValues[nibble32(blocks[b].qs, i)]);
  }
}

void dequantize_row_iq4_xs(const BlockIq4Xs* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int s = 0; s < kQK_K / kGroup; ++s) {
      const float dl = d * static_cast<float>(iq4_xs_scale(blocks[b], s) - 32);
      const uint8_t* qs = blocks[b].qs + 16 * s;
      for (int i = 0; i < kGroup; ++i)
        dst[b * kQK_K + s * kGroup + i] = dl * static_cast<float>(kIq4NlValues[nibble32(qs, i)]);
    }
  }
}

void quantize_row_iq4_nl(const float* src, BlockIq4Nl* blocks, int64_t n) {
  CHECK(n % kQK4_NL == 0);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float* x = src + b * kGroup;
    uint8_t idx[kGroup];
    blocks[b].d = f32_to_f16(fit_group(x, idx));
    refit(x, f16_to_f32(blocks[b].d), idx);
    pack_nibbles(idx, blocks[b].qs);
  }
}

void quantize_row_iq4_xs(const float* src, BlockIq4Xs* blocks, int64_t n) {
  CHECK(n % kQK_K == 0);
  constexpr int kGroups = kQK_K / kGroup;  // 8
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockIq4Xs& out = blocks[b];
    uint8_t idx[kQK_K];
    float scales[kGroups];
    float max_scale = 0.0f, max_abs = 0.0f;  // signed group scale of largest magnitude
    for (int s = 0; s < kGroups; ++s) {
      scales[s] = fit_group(x + s * kGroup, idx + s * kGroup);
      if (std::fabs(scales[s]) > max_abs) {
        max_abs = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::memset(&out, 0, sizeof(out));
    // 6-bit signed group scales (ls - 32 in [-32, 31]); the largest maps to -32.
    const float d = max_abs > kGroupMaxEps ? max_scale / -32.0f : 0.0f;
    out.d = f32_to_f16(d);
    const float d_stored = f16_to_f32(out.d);
    for (int s = 0; s < kGroups; ++s) {
      const int ls = d_stored != 0.0f ? std::clamp(static_cast<int>(std::lrintf(scales[s] / d_stored)), -32, 31) : 0;
      const int u = ls + 32;
      out.scales_l[s / 2] |= static_cast<uint8_t>((u & 15) << (4 * (s % 2)));
      out.scales_h |= static_cast<uint16_t>((u >> 4) << (2 * s));
      refit(x + s * kGroup, d_stored * static_cast<float>(ls), idx + s * kGroup);
      pack_nibbles(idx + s * kGroup, out.qs + 16 * s);
    }
  }
}

}  // namespace sluice
