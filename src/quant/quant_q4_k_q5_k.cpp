// Q4_K and Q5_K rows: the super-blocks of 8 x 32 elements with 6-bit scales and
// mins against f16 d / dmin (k_scale_min.h), 4- and 5-bit quants. One
// dequantizer and one quantizer over the block type; the types differ only in
// the quant width (the search's range) and how the quants are packed.
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/blocks.h"
#include "quant/blocks_more.h"
#include "quant/k_scale_min.h"

namespace sluice {
namespace {

// Candidate inverse scales (quant_max + rmin + rdelta i) / range, i = 0..steps.
constexpr KScaleMinSearch kQ4KSearch{.quant_max = 15, .rmin = -1.0f, .rdelta = 0.1f, .steps = 20};
constexpr KScaleMinSearch kQ5KSearch{.quant_max = 31, .rmin = -0.5f, .rdelta = 0.1f, .steps = 15};

// The quant of element e (0..255) and the packing of a fitted super-block's quants.
int quant_of(const BlockQ4_K& b, int e) { return q4_k_quant(b, e); }
int quant_of(const BlockQ5_K& b, int e) { return q5_k_quant(b, e); }

// Byte 32c + l holds element 64c + l (low nibble) and 64c + 32 + l (high).
void pack_quants(const uint8_t* q, BlockQ4_K* out) {
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) out->qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

// As Q4_K for the low four bits; the fifth bit of element 64c + 32k + l goes to
// bit 2c + k of qh[l] (blocks_more.h).
void pack_quants(const uint8_t* q, BlockQ5_K* out) {
  std::memset(out->qh, 0, sizeof(out->qh));
  for (int c = 0; c < kQK_K / 64; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      out->qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      out->qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// Element e of a super-block: scale(s) * q - min(s), s = e / 32.
template <typename Block>
void dequantize_rows(const Block* blocks, float* dst, int64_t n) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int s = 0; s < kScaleMinSubBlocks; ++s) {
      float scale = 0.0f, min = 0.0f;
      k_sub_block_scale_min(blocks[b].d, blocks[b].dmin, blocks[b].scales, s, &scale, &min);
      for (int l = 0; l < kScaleMinSubBlock; ++l) {
        const int e = s * kScaleMinSubBlock + l;
        dst[b * kQK_K + e] = scale * static_cast<float>(quant_of(blocks[b], e)) - min;
      }
    }
  }
}

template <typename Block>
void quantize_rows(const float* src, Block* blocks, int64_t n, const KScaleMinSearch& search) {
  CHECK(n % kQK_K == 0);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    KScaleMinFit fit;
    fit_k_scale_min(src + b * kQK_K, search, &fit);
    blocks[b].d = fit.d;
    blocks[b].dmin = fit.dmin;
    std::memcpy(blocks[b].scales, fit.scales, sizeof(blocks[b].scales));
    pack_quants(fit.q, &blocks[b]);
  }
}

}  // namespace

void dequantize_row_q4_k(const BlockQ4_K* blocks, float* dst, int64_t n) { dequantize_rows(blocks, dst, n); }
void dequantize_row_q5_k(const BlockQ5_K* blocks, float* dst, int64_t n) { dequantize_rows(blocks, dst, n); }

void quantize_row_q4_k(const float* src, BlockQ4_K* blocks, int64_t n) { quantize_rows(src, blocks, n, kQ4KSearch); }
void quantize_row_q5_k(const float* src, BlockQ5_K* blocks, int64_t n) { quantize_rows(src, blocks, n, kQ5KSearch); }

}  // namespace sluice
