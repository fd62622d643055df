// Portable integer-dot-product kernels: the algorithm of the SIMD levels in plain
// C++ (exact integer dot per block, then one float update per block), one
// (row, token) at a time. The fallback on CPUs without AVX2 and the first thing
// the tests check against dequantize_row.
#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/repack.h"
#include "base/check.h"
#include "base/half.h"
#include "quant/blocks.h"

namespace sluice::cpu {
namespace {

// Q8_0 row . activations: per block total += float(sum w * q) * (wd * ad).
float q8_0_term(const BlockQ8_0& w, const ActQ8x64& a, int h) {
  const int8_t* q = a.q + 32 * h;
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += w.qs[i] * q[i];
  return static_cast<float>(isum) * (f16_to_f32(w.d) * a.d[8 * h]);
}

float dot_q8_0(const BlockQ8_0* wb, const ActQ8x64* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) total += q8_0_term(wb[b], a[b / 2], static_cast<int>(b % 2));
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

float dot_q4_0(const BlockQ4_0* wb, const ActQ8x64* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) total += q4_0_term(wb[b], a[b / 2], static_cast<int>(b % 2));
  return total;
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
void rows_of_layout(const uint8_t* w, int64_t n_in, const uint8_t* xa, size_t xa_stride, int64_t n_tok, float* y,
                    int64_t y_stride, int64_t r0, int64_t r1) {
  CHECK(n_in % kInMultiple == 0 && r0 % kRows == 0 && r1 % kRows == 0);
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x64*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r) y[t * y_stride + r] = Dot(w, n_in, r, a);
  }
}

// Q4_K: isum = sum_s sc_s * sum(n * q), msum = sum_s m_s * (qsum of sub-block s).
float dot_q4_k(const BlockQ4_K* wb, const ActQ8x256* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum = 0, msum = 0;
    for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles), 2c+1 (high)
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      q4_k_scale_min(wb[b].scales, 2 * c, &sc_lo, &m_lo);
      q4_k_scale_min(wb[b].scales, 2 * c + 1, &sc_hi, &m_hi);
      const uint8_t* qs = wb[b].qs + 32 * c;
      const int8_t* q = a[b].q + 64 * c;
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (qs[l] & 15) * q[l];
        hi += (qs[l] >> 4) * q[l + 32];
      }
      isum += sc_lo * lo + sc_hi * hi;
      msum += m_lo * (a[b].bsum[4 * c] + a[b].bsum[4 * c + 1]) +
              m_hi * (a[b].bsum[4 * c + 2] + a[b].bsum[4 * c + 3]);
    }
    total += static_cast<float>(isum) * (f16_to_f32(wb[b].d) * a[b].d) -
             static_cast<float>(msum) * (f16_to_f32(wb[b].dmin) * a[b].d);
  }
  return total;
}

// Q6_K: isum = sum_s sc_s * (sum(u * q) - 32 * qsum_s), u the 6-bit quant 0..63.
float dot_q6_k(const BlockQ6_K* wb, const ActQ8x256* a, int64_t n_blocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) dot += q6_k_quant(wb[b], 16 * s + l) * a[b].q[16 * s + l];
      isum += wb[b].scales[s] * (dot - 32 * a[b].bsum[s]);
    }
    total += static_cast<float>(isum) * (f16_to_f32(wb[b].d) * a[b].d);
  }
  return total;
}

}  // namespace

void quant_rows_q8_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x64*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(w + r * w_row_bytes), a, n_in / 32);
  }
}

void quant_rows_q8_0x8_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                              int64_t r1) {
  rows_of_layout<dot_q8_0x8, kX8Rows, 32>(w, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q8_0x16_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                               size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                               int64_t r1) {
  rows_of_layout<dot_q8_0x16, kX16Rows, 32>(w, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q4_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x64*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = dot_q4_0(reinterpret_cast<const BlockQ4_0*>(w + r * w_row_bytes), a, n_in / 32);
  }
}

void quant_rows_q4_0x4_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                              int64_t r1) {
  rows_of_layout<dot_q4_0x4, kQ4_0x4Rows, 64>(w, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q4_0x8_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                              size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                              int64_t r1) {
  rows_of_layout<dot_q4_0x8, kX8Rows, 32>(w, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void quant_rows_q4_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x256*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = dot_q4_k(reinterpret_cast<const BlockQ4_K*>(w + r * w_row_bytes), a, n_in / 256);
  }
}

void quant_rows_q6_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0,
                            int64_t r1) {
  for (int64_t t = 0; t < n_tok; ++t) {
    const auto* a = reinterpret_cast<const ActQ8x256*>(xa + t * xa_stride);
    for (int64_t r = r0; r < r1; ++r)
      y[t * y_stride + r] = dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w + r * w_row_bytes), a, n_in / 256);
  }
}

}  // namespace sluice::cpu
