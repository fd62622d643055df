#include "quant/k_scale_min.h"

#include <algorithm>
#include <cmath>

#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kScaleMax = 63;                     // 6-bit scales and mins

int round_clamp(float v, int hi) { return std::clamp(static_cast<int>(std::lrintf(v)), 0, hi); }

}  // namespace

void fit_k_scale_min(const float* x, const KScaleMinSearch& p, KScaleMinFit* out) {
  uint8_t q_tmp[kScaleMinSubBlock];      // scratch for the search
  float weights[kScaleMinSubBlock];
  float scales[kScaleMinSubBlocks];   // float scale per sub-block
  float mins[kScaleMinSubBlocks];     // float offset (>= 0, subtracted) per sub-block
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int s = 0; s < kScaleMinSubBlocks; ++s) {
    const float* xs = x + s * kScaleMinSubBlock;
    // Weight each element by the sub-block's RMS plus its own magnitude, so large
    // values (which matter most in a dot product) are fitted more closely.
    float sum_x2 = 0.0f;
    for (int l = 0; l < kScaleMinSubBlock; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / kScaleMinSubBlock);
    for (int l = 0; l < kScaleMinSubBlock; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[s] = search_scale_min(kScaleMinSubBlock, p.quant_max, xs, weights, out->q + s * kScaleMinSubBlock, q_tmp, &mins[s],
                                 p.rmin, p.rdelta, p.steps);
    max_scale = std::max(max_scale, scales[s]);
    max_min = std::max(max_min, mins[s]);
  }

  // 6-bit scales and mins relative to the two f16 super-block scales.
  const float inv_scale = max_scale > 0.0f ? kScaleMax / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? kScaleMax / max_min : 0.0f;
  uint8_t sc6[kScaleMinSubBlocks], m6[kScaleMinSubBlocks];
  for (int s = 0; s < kScaleMinSubBlocks; ++s) {
    sc6[s] = static_cast<uint8_t>(round_clamp(inv_scale * scales[s], kScaleMax));
    m6[s] = static_cast<uint8_t>(round_clamp(inv_min * mins[s], kScaleMax));
  }
  q4_k_pack_scales(sc6, m6, out->scales);
  out->d = f32_to_f16(max_scale / kScaleMax);
  out->dmin = f32_to_f16(max_min / kScaleMax);

  // Re-fit the quants to the scales the block actually stores.
  for (int s = 0; s < kScaleMinSubBlocks; ++s) {
    float scale = 0.0f, min = 0.0f;
    k_sub_block_scale_min(out->d, out->dmin, out->scales, s, &scale, &min);
    if (scale == 0.0f) continue;  // every quant decodes to -min; keep the search's
    for (int l = 0; l < kScaleMinSubBlock; ++l) {
      const int e = s * kScaleMinSubBlock + l;
      out->q[e] = static_cast<uint8_t>(round_clamp((x[e] + min) / scale, p.quant_max));
    }
  }
}

}  // namespace sluice
