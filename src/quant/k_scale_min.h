// The super-block scheme Q4_K and Q5_K share: 256 values in 8 sub-blocks of
// 32, each fitted as x ~= (d * sc[s]) * q - (dmin * m[s]) with 6-bit sc and m
// (packed into 12 bytes, blocks.h) and f16 d and dmin. Only the width of q and
// the search grid differ between the two types.
//
//   1. per sub-block, search_scale_min (k_quant_search.h) picks a float scale
//      and min, weighting each value by the sub-block's RMS plus its magnitude;
//   2. d = max scale / 63, dmin = max min / 63, sc and m the rounded ratios;
//   3. the quants are refitted to the scales the block actually stores.
//
// Pure functions, no allocation.
#pragma once

#include <cstdint>

#include "base/half.h"
#include "quant/blocks.h"

namespace sluice {

// Q4_K and Q5_K: a super-block of kQK_K holds 8 sub-blocks of 32 elements, each
// with a 6-bit scale and min.
inline constexpr int kScaleMinSubBlock = 32;
inline constexpr int kScaleMinSubBlocks = 8;

struct KScaleMinSearch {
  int quant_max;  // 15 (Q4_K), 31 (Q5_K)
  float rmin;     // candidate inverse scales (quant_max + rmin + rdelta * i) / range,
  float rdelta;   // i = 0..steps
  int steps;
};

struct KScaleMinFit {
  uint16_t d = 0;            // f16 scale of the sub-block scales
  uint16_t dmin = 0;         // f16 scale of the sub-block mins
  uint8_t scales[12] = {};   // 6-bit sc[8] and m[8], packed as q4_k_pack_scales
  uint8_t q[kQK_K] = {};     // [256] quants in [0, quant_max], element order
};

// Fits one super-block x[256].
void fit_k_scale_min(const float* x, const KScaleMinSearch& search, KScaleMinFit* out);

// The float scale d * sc[s] and offset dmin * m[s] of sub-block s (0..7), as
// dequantization uses them.
inline void k_sub_block_scale_min(uint16_t d, uint16_t dmin, const uint8_t* scales, int s, float* scale,
                                  float* min) {
  uint8_t sc = 0, m = 0;
  q4_k_scale_min(scales, s, &sc, &m);
  *scale = f16_to_f32(d) * static_cast<float>(sc);
  *min = f16_to_f32(dmin) * static_cast<float>(m);
}

}  // namespace sluice
