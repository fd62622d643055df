// Repacks in vector registers, for CPUs with AVX2 (byte for byte what the
// reference repacks in repack.cpp write: Repack tests); streamed experts are
// repacked with them as they land.
//
// The layouts of 4-byte lanes (repack.h: Q4_0x8, Q8_0x8, Q8_0x16): a block's 8
// rows are an 8 x 4 (Q4_0) or 8 x 8 (Q8_0) matrix of 4-byte lanes, and their
// part of a record is its transpose, so each 16 quant bytes of 8 rows go
// through one in-register 4 x 4 transpose per 128-bit half (Q8_0x16: two such
// groups of 8 rows, side by side in each lane's chunk, bytes xor 0x80).
//
// Q4_0x4: a row's 32 nibble bytes of a record are its two blocks' 16 quant
// bytes each, nibbles regrouped by element (low nibbles of both blocks, then
// high nibbles): two masks, two shifts and two ors per 16 bytes.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/repack.h"
#include "base/check.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace sluice::cpu {
namespace {

// Rows i and i + 4's 16 bytes at byte `at` of their blocks, one per 128-bit half.
inline __m256i pair(const uint8_t* const* blk, int i, size_t at) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[i] + at));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[i + 4] + at));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// 16 quant bytes (4 lanes) of each of the 8 rows blk[0..7] -> 4 chunks of 32
// bytes, `stride` bytes apart, each byte xor `bias`: chunk c = lane c of rows 0..7.
inline void transpose16(const uint8_t* const* blk, size_t at, uint8_t* out, size_t stride, __m256i bias) {
  const __m256i r04 = pair(blk, 0, at), r15 = pair(blk, 1, at), r26 = pair(blk, 2, at), r37 = pair(blk, 3, at);
  const __m256i t0 = _mm256_unpacklo_epi32(r04, r15), t1 = _mm256_unpacklo_epi32(r26, r37);
  const __m256i t2 = _mm256_unpackhi_epi32(r04, r15), t3 = _mm256_unpackhi_epi32(r26, r37);
  const __m256i c[4] = {_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1), _mm256_unpacklo_epi64(t2, t3),
                        _mm256_unpackhi_epi64(t2, t3)};
  for (int k = 0; k < 4; ++k)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k * stride), _mm256_xor_si256(c[k], bias));
}

}  // namespace

void repack_lanes_avx2(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(layout == WeightLayout::kQ4_0x8 || layout == WeightLayout::kQ8_0x8 || layout == WeightLayout::kQ8_0x16);
  const int64_t rows = repack_group_rows(layout);  // 8 or 16: one or two transposes of 8 rows
  CHECK(n_in % 32 == 0 && r0 % rows == 0 && r1 % rows == 0);
  const DType type = repacked_type(layout);
  const size_t block = type == DType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const size_t quant = block - 2;  // 16 or 32 bytes: 1 or 2 transposes
  const size_t rb = row_bytes(type, n_in);
  const size_t stride = 4 * static_cast<size_t>(rows);  // one lane of every row
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(layout == WeightLayout::kQ8_0x16 ? 0x80 : 0));
  for (int64_t g = r0 / rows; g < r1 / rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g * rows) * rb;
    const uint8_t* blk[kX16Rows];
    for (int64_t i = 0; i < rows; ++i) blk[i] = src + static_cast<size_t>(g * rows + i) * rb;
    for (int64_t b = 0; b < n_in / 32; ++b) {
      for (int64_t i = 0; i < rows; ++i) std::memcpy(rec + 2 * i, blk[i], 2);
      uint8_t* lanes = rec + 2 * rows;
      for (size_t h = 0; h < quant; h += 16)
        for (int64_t r8 = 0; r8 < rows; r8 += 8)
          transpose16(blk + r8, 2 + h, lanes + h / 4 * stride + 4 * r8, stride, bias);
      rec += static_cast<size_t>(rows) * block;
      for (int64_t i = 0; i < rows; ++i) blk[i] += block;
    }
  }
}

void repack_q4_0x4_avx2(const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(n_in % 64 == 0 && r0 % kQ4_0x4Rows == 0 && r1 % kQ4_0x4Rows == 0);
  const size_t rb = row_bytes(DType::kQ4_0, n_in);
  const int64_t n_pairs = n_in / 64;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int64_t g = r0 / kQ4_0x4Rows; g < r1 / kQ4_0x4Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g * kQ4_0x4Rows) * rb;
    const uint8_t* row[kQ4_0x4Rows];
    for (int64_t i = 0; i < kQ4_0x4Rows; ++i) row[i] = src + static_cast<size_t>(g * kQ4_0x4Rows + i) * rb;
    for (int64_t p = 0; p < n_pairs; ++p, rec += kQ4_0x4RecordBytes) {
      for (int i = 0; i < kQ4_0x4Rows; ++i) {
        const uint8_t* b0 = row[i] + 2 * p * sizeof(BlockQ4_0);  // d, qs[16]; then block 2p + 1
        const uint8_t* b1 = b0 + sizeof(BlockQ4_0);
        std::memcpy(rec + 4 * i, b0, 2);
        std::memcpy(rec + 4 * i + 2, b1, 2);
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + 2));
        // Elements k: low nibbles of both; elements 16 + k: high nibbles of both.
        const __m128i lo = _mm_or_si128(_mm_and_si128(q0, low4), _mm_slli_epi16(_mm_and_si128(q1, low4), 4));
        const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q0, 4), low4), _mm_andnot_si128(low4, q1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(rec + 16 + 32 * i), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(rec + 16 + 32 * i + 16), hi);
      }
    }
  }
}

}  // namespace sluice::cpu
