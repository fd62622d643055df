// Portable integer-dot-product kernels for the types of quant_matmul_more.h: the
// exact integer dot per block (or sub-block), then the float updates documented
// there, one (row, token) at a time. The fallback where no SIMD kernel exists and
// the reference the SIMD kernels are tested against.
#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul_more.h"
#include "base/half.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// Sum of the 32 int8 quants of half h of an ActQ8x64 group.
int32_t qsum32(const ActQ8x64& a, int h) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += a.q[32 * h + i];
  return s;
}

float q4_1_term(const BlockQ4_1& w, const ActQ8x64& a, int h) {
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += nibble32(w.qs, i) * a.q[32 * h + i];
  const float ad = a.d[8 * h];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * ad) + f16_to_f32(w.m) * (ad * static_cast<float>(qsum32(a, h)));
}

float q5_1_term(const BlockQ5_1& w, const ActQ8x64& a, int h) {
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += (nibble32(w.qs, i) | (q5_high_bit(w.qh, i) << 4)) * a.q[32 * h + i];
  const float ad = a.d[8 * h];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * ad) + f16_to_f32(w.m) * (ad * static_cast<float>(qsum32(a, h)));
}

float q5_0_term(const BlockQ5_0& w, const ActQ8x64& a, int h) {
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += ((nibble32(w.qs, i) | (q5_high_bit(w.qh, i) << 4)) - 16) * a.q[32 * h + i];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d[8 * h]);
}

float iq4_nl_term(const BlockIq4Nl& w, const ActQ8x64& a, int h) {
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += kIq4NlValues[nibble32(w.qs, i)] * a.q[32 * h + i];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d[8 * h]);
}

// A row of 32-element blocks against ActQ8x64 groups (two blocks per group).
template <typename Block, float (*Term)(const Block&, const ActQ8x64&, int)>
float dot32(const Block* wb, const ActQ8x64* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) total += Term(wb[b], a[b / 2], static_cast<int>(b % 2));
  return total;
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

// rows() over any row dot: y[t][r] = Dot(row r, token t's activations).
template <typename Block, typename Act, float (*Dot)(const Block*, const Act*, int64_t), int64_t kBlock>
void rows(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok,
          float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const Act*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = Dot(reinterpret_cast<const Block*>(w + r * w_row_bytes), a, n_in / kBlock);
  }
}

}  // namespace

void quant_rows_q4_1_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ4_1, ActQ8x64, dot32<BlockQ4_1, q4_1_term>, 32>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                              y_stride, r0, r1);
}

void quant_rows_q5_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ5_0, ActQ8x64, dot32<BlockQ5_0, q5_0_term>, 32>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                              y_stride, r0, r1);
}

void quant_rows_q5_1_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ5_1, ActQ8x64, dot32<BlockQ5_1, q5_1_term>, 32>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                              y_stride, r0, r1);
}

void quant_rows_iq4_nl_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockIq4Nl, ActQ8x64, dot32<BlockIq4Nl, iq4_nl_term>, 32>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                                  y_stride, r0, r1);
}

void quant_rows_q2_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ2_K, ActQ8x256, dot256<BlockQ2_K, q2_k_term>, 256>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                                 y_stride, r0, r1);
}

void quant_rows_q3_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ3_K, ActQ8x256, dot256<BlockQ3_K, q3_k_term>, 256>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                                 y_stride, r0, r1);
}

void quant_rows_q5_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockQ5_K, ActQ8x256, dot256<BlockQ5_K, q5_k_term>, 256>(w, w_row_bytes, n_in, xa, xa_stride, n_tok, y,
                                                                 y_stride, r0, r1);
}

void quant_rows_iq4_xs_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows<BlockIq4Xs, ActQ8x256, dot256<BlockIq4Xs, iq4_xs_term>, 256>(w, w_row_bytes, n_in, xa, xa_stride, n_tok,
                                                                     y, y_stride, r0, r1);
}

}  // namespace sluice::cpu
