// Portable integer-dot-product kernels for the types on super-blocks of 256
// (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS): the exact integer dot per super-block
// (by sub-block), then the float updates of quant_rows.h, one (row, token) at a
// time. The fallback where no SIMD kernel exists and the reference the SIMD
// kernels are tested against.
#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile.h"
#include "base/half.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// Q4_K: isum = sum_s sc_s * sum(n * q), msum = sum_s m_s * (qsum of sub-block s).
float q4_k_term(const BlockQ4_K& w, const ActQ8x256& a) {
  int32_t isum = 0, msum = 0;
  for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles), 2c+1 (high)
    uint8_t sc_lo, m_lo, sc_hi, m_hi;
    q4_k_scale_min(w.scales, 2 * c, &sc_lo, &m_lo);
    q4_k_scale_min(w.scales, 2 * c + 1, &sc_hi, &m_hi);
    const uint8_t* qs = w.qs + 32 * c;
    const int8_t* q = a.q + 64 * c;
    int32_t lo = 0, hi = 0;
    for (int l = 0; l < 32; ++l) {
      lo += (qs[l] & 15) * q[l];
      hi += (qs[l] >> 4) * q[l + 32];
    }
    isum += sc_lo * lo + sc_hi * hi;
    msum += m_lo * (a.bsum[4 * c] + a.bsum[4 * c + 1]) + m_hi * (a.bsum[4 * c + 2] + a.bsum[4 * c + 3]);
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d) - static_cast<float>(msum) * (f16_to_f32(w.dmin) * a.d);
}

// Q6_K: isum = sum_s sc_s * (sum(u * q) - 32 * qsum_s), u the 6-bit quant 0..63.
float q6_k_term(const BlockQ6_K& w, const ActQ8x256& a) {
  int32_t isum = 0;
  for (int s = 0; s < 16; ++s) {
    int32_t dot = 0;
    for (int l = 0; l < 16; ++l) dot += q6_k_quant(w, 16 * s + l) * a.q[16 * s + l];
    isum += w.scales[s] * (dot - 32 * a.bsum[s]);
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d);
}

float q2_k_term(const BlockQ2_K& w, const ActQ8x256& a) {
  int32_t isum = 0, msum = 0;
  for (int s = 0; s < 16; ++s) {
    int32_t dot = 0;
    for (int l = 0; l < 16; ++l) dot += q2_k_quant(w, 16 * s + l) * a.q[16 * s + l];
    isum += (w.scales[s] & 15) * dot;
    msum += (w.scales[s] >> 4) * a.bsum[s];
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d) - static_cast<float>(msum) * (f16_to_f32(w.dmin) * a.d);
}

float q3_k_term(const BlockQ3_K& w, const ActQ8x256& a) {
  int32_t isum = 0;
  for (int s = 0; s < 16; ++s) {
    int32_t dot = 0;
    for (int l = 0; l < 16; ++l) dot += (q3_k_quant(w, 16 * s + l) - 4) * a.q[16 * s + l];
    isum += (q3_k_scale(w.scales, s) - 32) * dot;
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d);
}

float q5_k_term(const BlockQ5_K& w, const ActQ8x256& a) {
  int32_t isum = 0, msum = 0;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc = 0, m = 0;
    q4_k_scale_min(w.scales, s, &sc, &m);
    int32_t dot = 0;
    for (int l = 0; l < 32; ++l) dot += q5_k_quant(w, 32 * s + l) * a.q[32 * s + l];
    isum += sc * dot;
    msum += m * (a.bsum[2 * s] + a.bsum[2 * s + 1]);
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d) - static_cast<float>(msum) * (f16_to_f32(w.dmin) * a.d);
}

float iq4_xs_term(const BlockIq4Xs& w, const ActQ8x256& a) {
  int32_t isum = 0;
  for (int s = 0; s < 8; ++s) {
    int32_t dot = 0;
    for (int i = 0; i < 32; ++i) dot += kIq4NlValues[nibble32(w.qs + 16 * s, i)] * a.q[32 * s + i];
    isum += (iq4_xs_scale(w, s) - 32) * dot;
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d);
}

// A row of 256-element super-blocks against ActQ8x256 blocks.
template <typename Block, float (*Term)(const Block&, const ActQ8x256&)>
float dot256(const Block* wb, const ActQ8x256* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) total += Term(wb[b], a[b]);
  return total;
}

}  // namespace

const QuantRowsFn quant_rows_q2_k_scalar = scalar_rows<BlockQ2_K, ActQ8x256, dot256<BlockQ2_K, q2_k_term>, 256>;
const QuantRowsFn quant_rows_q3_k_scalar = scalar_rows<BlockQ3_K, ActQ8x256, dot256<BlockQ3_K, q3_k_term>, 256>;
const QuantRowsFn quant_rows_q5_k_scalar = scalar_rows<BlockQ5_K, ActQ8x256, dot256<BlockQ5_K, q5_k_term>, 256>;
const QuantRowsFn quant_rows_iq4_xs_scalar = scalar_rows<BlockIq4Xs, ActQ8x256, dot256<BlockIq4Xs, iq4_xs_term>, 256>;
const QuantRowsFn quant_rows_q4_k_scalar = scalar_rows<BlockQ4_K, ActQ8x256, dot256<BlockQ4_K, q4_k_term>, 256>;
const QuantRowsFn quant_rows_q6_k_scalar = scalar_rows<BlockQ6_K, ActQ8x256, dot256<BlockQ6_K, q6_k_term>, 256>;

}  // namespace sluice::cpu
