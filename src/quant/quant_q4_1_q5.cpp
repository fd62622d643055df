#include "quant/blocks_more.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/k_quant_search.h"

namespace sluice {
namespace {

constexpr int kBlock = 32;
// Candidate inverse scales of the type-1 search: (nmax - 1 + 0.1 i) / range, i = 0..20.
constexpr float kSearchRmin = -1.0f;
constexpr float kSearchRdelta = 0.1f;
constexpr int kType1SearchSteps = 20;
constexpr int kSymmetricSteps = 9;  // +-9 candidate steps of 0.1 (Q5_0)

// Type-1 fit of one block: x ~= scale * q + offset, q in [0, nmax]; stores the
// f16 scale and offset and returns the quants re-fitted to them in q[32].
void fit_type1(const float* x, int nmax, uint16_t* d_out, uint16_t* m_out, uint8_t* q) {
  // The search keeps its offset <= 0; searching x - min(x) lifts that limit.
  const float lo = *std::min_element(x, x + kBlock);
  float shifted[kBlock], weights[kBlock];
  uint8_t q_tmp[kBlock];
  for (int i = 0; i < kBlock; ++i) {
    shifted[i] = x[i] - lo;
    weights[i] = 1.0f;  // plain squared error
  }
  float min_out = 0.0f;
  const float scale = search_scale_min(kBlock, nmax, shifted, weights, q, q_tmp, &min_out, kSearchRmin,
                                       kSearchRdelta, kType1SearchSteps);
  *d_out = f32_to_f16(scale);
  *m_out = f32_to_f16(lo - min_out);
  const float d = f16_to_f32(*d_out), m = f16_to_f32(*m_out);
  if (d == 0.0f) {
    std::memset(q, 0, kBlock);  // every element decodes to m
    return;
  }
  for (int i = 0; i < kBlock; ++i)
    q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lrintf((x[i] - m) / d)), 0, nmax));
}

// Nibbles as in Q4_0: byte j = q[j] | q[j + 16] << 4 (low 4 bits of q).
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kBlock / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

// Fifth bits: bit i of the little-endian uint32 qh = bit 4 of q[i].
void pack_high_bits(const uint8_t* q, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int i = 0; i < kBlock; ++i) qh[i / 8] |= static_cast<uint8_t>(((q[i] >> 4) & 1) << (i % 8));
}

// The type-1 blocks (value = q * d + m): their quants and their packing.
int quant_of(const BlockQ4_1& b, int i) { return nibble32(b.qs, i); }
int quant_of(const BlockQ5_1& b, int i) { return nibble32(b.qs, i) | (q5_high_bit(b.qh, i) << 4); }
void pack(const uint8_t* q, BlockQ4_1* b) { pack_nibbles(q, b->qs); }
void pack(const uint8_t* q, BlockQ5_1* b) {
  pack_nibbles(q, b->qs);
  pack_high_bits(q, b->qh);
}

template <typename Block>
void dequantize_type1(const Block* blocks, float* dst, int64_t n) {
  CHECK(n % kBlock == 0);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float d = f16_to_f32(blocks[b].d), m = f16_to_f32(blocks[b].m);
    for (int i = 0; i < kBlock; ++i) dst[b * kBlock + i] = static_cast<float>(quant_of(blocks[b], i)) * d + m;
  }
}

// nmax: the largest quant (15 or 31).
template <typename Block>
void quantize_type1(const float* src, Block* blocks, int64_t n, int nmax) {
  CHECK(n % kBlock == 0);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    uint8_t q[kBlock];
    fit_type1(src + b * kBlock, nmax, &blocks[b].d, &blocks[b].m, q);
    pack(q, &blocks[b]);
  }
}

}  // namespace

void dequantize_row_q4_1(const BlockQ4_1* blocks, float* dst, int64_t n) { dequantize_type1(blocks, dst, n); }

void dequantize_row_q5_0(const BlockQ5_0* blocks, float* dst, int64_t n) {
  CHECK(n % kQK5_0 == 0);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float d = f16_to_f32(blocks[b].d);
    for (int i = 0; i < kBlock; ++i) {
      const int q = nibble32(blocks[b].qs, i) | (q5_high_bit(blocks[b].qh, i) << 4);
      dst[b * kBlock + i] = static_cast<float>(q - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const BlockQ5_1* blocks, float* dst, int64_t n) { dequantize_type1(blocks, dst, n); }

void quantize_row_q4_1(const float* src, BlockQ4_1* blocks, int64_t n) { quantize_type1(src, blocks, n, 15); }

void quantize_row_q5_1(const float* src, BlockQ5_1* blocks, int64_t n) { quantize_type1(src, blocks, n, 31); }

void quantize_row_q5_0(const float* src, BlockQ5_0* blocks, int64_t n) {
  CHECK(n % kQK5_0 == 0);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float* x = src + b * kBlock;
    uint8_t q[kBlock];  // q - 16 is the signed quant
    const float scale = search_scale_symmetric(kBlock, 16, x, q, kSymmetricSteps);
    blocks[b].d = f32_to_f16(scale);
    const float d = f16_to_f32(blocks[b].d);
    if (d != 0.0f) {
      for (int i = 0; i < kBlock; ++i)
        q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lrintf(x[i] / d)), -16, 15) + 16);
    }
    pack_nibbles(q, blocks[b].qs);
    pack_high_bits(q, blocks[b].qh);
  }
}

}  // namespace sluice
