// Portable integer-dot-product kernels for the types on blocks of 32 (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) and the repacked Q4_0 / Q8_0 layouts: the
// algorithm of the SIMD levels in plain C++ (exact integer dot per block, then
// one float update per block, quant_rows.h), one (row, token) at a time. The
// fallback on CPUs without AVX2 and the first thing the tests check against
// dequantize_row.
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_rows.h"
#include "backend/cpu/quant_tile.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "base/half.h"
#include "quant/blocks_more.h"

namespace sluice::cpu {
namespace {

// Q8_0 row . activations: per block total += float(sum w * q) * (wd * ad).
float q8_0_term(const BlockQ8_0& w, const ActQ8x64& a, int h) {
  const int8_t* q = a.q + 32 * h;
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += w.qs[i] * q[i];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d[8 * h]);
}

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

// Row r of a matrix in a layout of one record per block of `kRows` rows (Q8_0x8,
// Q8_0x16, Q4_0x8), unpacked block by block: a record is itself such a matrix
// of kRows rows x 32 columns. The same terms, in the same order, as the dot of
// the GGUF row.
template <class Block, int64_t kRows, size_t kRecordBytes, void (*Unpack)(const uint8_t*, uint8_t*, int64_t, int64_t),
          float (*Term)(const Block&, const ActQ8x64&, int)>
float dot_per_block(const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t r, const ActQ8x64* a) {
  const uint8_t* group = w + static_cast<size_t>(r / kRows) * kRows * row_bytes;
  float total = 0.0f;
  for (int64_t b = 0; b < n_in / 32; ++b) {
    Block blk;
    Unpack(group + b * kRecordBytes, reinterpret_cast<uint8_t*>(&blk), 32, r % kRows);
    total += Term(blk, a[b / 2], static_cast<int>(b % 2));
  }
  return total;
}

float dot_q8_0x8(const uint8_t* w, int64_t n_in, int64_t r, const ActQ8x64* a) {
  return dot_per_block<BlockQ8_0, kX8Rows, kQ8_0x8RecordBytes, unpack_q8_0x8_row, q8_0_term>(
      w, row_bytes(DType::kQ8_0, n_in), n_in, r, a);
}

float dot_q8_0x16(const uint8_t* w, int64_t n_in, int64_t r, const ActQ8x64* a) {
  return dot_per_block<BlockQ8_0, kX16Rows, kQ8_0x16RecordBytes, unpack_q8_0x16_row, q8_0_term>(
      w, row_bytes(DType::kQ8_0, n_in), n_in, r, a);
}

// Q4_0: element i < 16 is the low nibble of qs[i], element 16 + i the high one.
// One block's term: float(sum (n - 8) * q) * (wd * ad); h: the block's half of a.
float q4_0_term(const BlockQ4_0& w, const ActQ8x64& a, int h) {
  const int8_t* q = a.q + 32 * h;
  int32_t isum = 0;
  for (int i = 0; i < 16; ++i) {
    isum += ((w.qs[i] & 15) - 8) * q[i];
    isum += ((w.qs[i] >> 4) - 8) * q[i + 16];
  }
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d[8 * h]);
}

// Row r of a Q4_0x4 matrix: each record's two blocks are unpacked to GGUF
// blocks, then the same terms in the same order as dot_q4_0.
float dot_q4_0x4(const uint8_t* w, int64_t n_in, int64_t r, const ActQ8x64* a) {
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  const uint8_t* group = w + static_cast<size_t>(r / kQ4_0x4Rows) * kQ4_0x4Rows * rb;
  float total = 0.0f;
  for (int64_t p = 0; p < n_in / 64; ++p) {
    // One record is itself a Q4_0x4 matrix of 4 rows x 64 columns.
    BlockQ4_0 blk[2];
    unpack_q4_0x4_row(group + p * kQ4_0x4RecordBytes, reinterpret_cast<uint8_t*>(blk), 64, r % kQ4_0x4Rows);
    total += q4_0_term(blk[0], a[p], 0);
    total += q4_0_term(blk[1], a[p], 1);
  }
  return total;
}

float dot_q4_0x8(const uint8_t* w, int64_t n_in, int64_t r, const ActQ8x64* a) {
  return dot_per_block<BlockQ4_0, kX8Rows, kQ4_0x8RecordBytes, unpack_q4_0x8_row, q4_0_term>(
      w, row_bytes(DType::kQ4_0, n_in), n_in, r, a);
}

// Rows [r0, r1) (multiples of kRows; n_in a multiple of kInMultiple) of a
// repacked matrix, each (row, token) by Dot.
template <float (*Dot)(const uint8_t*, int64_t, int64_t, const ActQ8x64*), int64_t kRows, int64_t kInMultiple>
void rows_of_layout(const uint8_t* w, size_t /*w_row_bytes*/, int64_t n_in, const uint8_t* xa, size_t xa_stride,
                    int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  CHECK(n_in % kInMultiple == 0 && r0 % kRows == 0 && r1 % kRows == 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x64*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r) y[t * y_stride + r] = Dot(w, n_in, r, a);
  }
}

}  // namespace

const QuantRowsFn quant_rows_q8_0_scalar = scalar_rows<BlockQ8_0, ActQ8x64, dot32<BlockQ8_0, q8_0_term>, 32>;
const QuantRowsFn quant_rows_q8_0x8_scalar = rows_of_layout<dot_q8_0x8, kX8Rows, 32>;
const QuantRowsFn quant_rows_q8_0x16_scalar = rows_of_layout<dot_q8_0x16, kX16Rows, 32>;
const QuantRowsFn quant_rows_q4_0_scalar = scalar_rows<BlockQ4_0, ActQ8x64, dot32<BlockQ4_0, q4_0_term>, 32>;
const QuantRowsFn quant_rows_q4_0x4_scalar = rows_of_layout<dot_q4_0x4, kQ4_0x4Rows, 64>;
const QuantRowsFn quant_rows_q4_0x8_scalar = rows_of_layout<dot_q4_0x8, kX8Rows, 32>;
const QuantRowsFn quant_rows_q4_1_scalar = scalar_rows<BlockQ4_1, ActQ8x64, dot32<BlockQ4_1, q4_1_term>, 32>;
const QuantRowsFn quant_rows_q5_0_scalar = scalar_rows<BlockQ5_0, ActQ8x64, dot32<BlockQ5_0, q5_0_term>, 32>;
const QuantRowsFn quant_rows_q5_1_scalar = scalar_rows<BlockQ5_1, ActQ8x64, dot32<BlockQ5_1, q5_1_term>, 32>;
const QuantRowsFn quant_rows_iq4_nl_scalar = scalar_rows<BlockIq4Nl, ActQ8x64, dot32<BlockIq4Nl, iq4_nl_term>, 32>;

}  // namespace sluice::cpu
