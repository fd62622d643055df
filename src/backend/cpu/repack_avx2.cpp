// Repacks in vector registers, for CPUs with AVX2 (byte for byte what the
// reference repacks in repack.cpp write: Repack tests); streamed experts are
// repacked with them as they land.
//
// The x8 layouts (repack.h: Q4_0x8, Q8_0x8): a block's 8 rows are an 8 x 4
// (Q4_0) or 8 x 8 (Q8_0) matrix of 4-byte lanes, and a record is its
// transpose, so each 16 quant bytes of 8 rows go through one in-register
// 4 x 4 transpose per 128-bit half.
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

// 16 quant bytes (4 lanes) of each of the 8 rows -> 4 chunks of 32 bytes:
// chunk c = lane c of rows 0..7.
inline void transpose16(const uint8_t* const* blk, size_t at, uint8_t* out) {
  const __m256i r04 = pair(blk, 0, at), r15 = pair(blk, 1, at), r26 = pair(blk, 2, at), r37 = pair(blk, 3, at);
  const __m256i t0 = _mm256_unpacklo_epi32(r04, r15), t1 = _mm256_unpacklo_epi32(r26, r37);
  const __m256i t2 = _mm256_unpackhi_epi32(r04, r15), t3 = _mm256_unpackhi_epi32(r26, r37);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_unpacklo_epi64(t0, t1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_unpackhi_epi64(t0, t1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64), _mm256_unpacklo_epi64(t2, t3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 96), _mm256_unpackhi_epi64(t2, t3));
}

}  // namespace

void repack_x8_avx2(WeightLayout layout, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t r0, int64_t r1) {
  CHECK(layout == WeightLayout::kQ4_0x8 || layout == WeightLayout::kQ8_0x8);
  CHECK(n_in % 32 == 0 && r0 % kX8Rows == 0 && r1 % kX8Rows == 0);
  const DType type = layout == WeightLayout::kQ4_0x8 ? DType::kQ4_0 : DType::kQ8_0;
  const size_t block = type == DType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const size_t quant = block - 2;  // 16 or 32 bytes: 1 or 2 transposes
  const size_t rb = row_bytes(type, n_in);
  for (int64_t g = r0 / kX8Rows; g < r1 / kX8Rows; ++g) {
    uint8_t* rec = dst + static_cast<size_t>(g * kX8Rows) * rb;
    const uint8_t* blk[kX8Rows];
    for (int64_t i = 0; i < kX8Rows; ++i) blk[i] = src + static_cast<size_t>(g * kX8Rows + i) * rb;
    for (int64_t b = 0; b < n_in / 32; ++b) {
      for (int64_t i = 0; i < kX8Rows; ++i) std::memcpy(rec + 2 * i, blk[i], 2);
      for (size_t h = 0; h < quant; h += 16) transpose16(blk, 2 + h, rec + 2 * kX8Rows + 8 * h);
      rec += kX8Rows * block;
      for (const uint8_t*& p : blk) p += block;
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
