// Packing in 256-bit vectors, shared by the AVX2 and AVX-512 levels of the
// training kernels (train_gemm.h): the 6-row A panels both levels use
// (TrainKernels::pack_a6), B panels of transposed rows (pack_b_t), and the
// dequantization of whole GGUF blocks to f32
// for the B panels of matmul_t (TrainKernels::dequantize). Included by
// train_gemm_avx2.cpp and train_gemm_avx512.cpp, each compiling it for its
// level (internal linkage); include it nowhere else.
//
// Every dequantized value is computed with the operations and the order of
// dequantize_row (quant/quant.h): a multiply, then a subtract, never fused,
// and the same f16 conversion, so the output is bit-identical to it.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/blocks_more.h"
#include "quant/dtype.h"

namespace sluice::cpu {
namespace {

// ap[kk * 6 + i] = row[i][kk] * scale for i < 6, kk < k: 8 x 8 transposes of
// rows 0..5 and two zero rows; each transposed column is stored as 8 floats
// at ap + kk * 6, the last two overwritten by the next one, so the final
// store runs 2 floats past the panel (the caller leaves room).
void pack_a6_simd(const float* const* row, int64_t k, float scale, float* ap) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    const __m256 r0 = _mm256_loadu_ps(row[0] + kk), r1 = _mm256_loadu_ps(row[1] + kk);
    const __m256 r2 = _mm256_loadu_ps(row[2] + kk), r3 = _mm256_loadu_ps(row[3] + kk);
    const __m256 r4 = _mm256_loadu_ps(row[4] + kk), r5 = _mm256_loadu_ps(row[5] + kk);
    const __m256 z = _mm256_setzero_ps();
    // 2 x 2 blocks of pairs, then of quads, then the 128-bit halves.
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, z, 0x44), u5 = _mm256_shuffle_ps(t4, z, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, z, 0x44), u7 = _mm256_shuffle_ps(t5, z, 0xEE);
    const __m256 col[8] = {
        _mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
        _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
        _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
        _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31),
    };
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(ap + (kk + j) * 6, _mm256_mul_ps(col[j], sc));
  }
  for (; kk < k; ++kk)
    for (int i = 0; i < 6; ++i) ap[kk * 6 + i] = row[i][kk] * scale;
}

// The 8 x 8 transpose of r: r[i][d] -> r[d][i].
inline void transpose8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// A B panel of strips kNr wide for B = S^T, S: [n rows of ld floats] x k:
// bp[s * k + kk * kNr + j] = S[s + j][kk] for each strip start s (columns
// past n are 0). Whole 8 x 8 blocks through transpose8, edges one by one.
template <int64_t kNr>
void pack_b_t_simd(const float* src, int64_t ld, int64_t k, int64_t n, float* bp) {
  for (int64_t s = 0; s < n; s += kNr, bp += kNr * k) {
    const int64_t cols = n - s < kNr ? n - s : kNr;
    int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
      for (int64_t jb = 0; jb < kNr; jb += 8) {
        if (jb + 8 <= cols) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (s + jb + i) * ld + kk);
          transpose8(r);
          for (int d = 0; d < 8; ++d) _mm256_storeu_ps(bp + (kk + d) * kNr + jb, r[d]);
        } else {
          for (int d = 0; d < 8; ++d)
            for (int64_t j = jb; j < jb + 8; ++j) bp[(kk + d) * kNr + j] = j < cols ? src[(s + j) * ld + kk + d] : 0.0f;
        }
      }
    }
    for (; kk < k; ++kk)
      for (int64_t j = 0; j < kNr; ++j) bp[kk * kNr + j] = j < cols ? src[(s + j) * ld + kk] : 0.0f;
  }
}

// dst[0..32) = scale * float(q[i]) - min for 32 unsigned bytes q
// (min == 0: the subtract is exact, as dequantize_row's formulas without one).
inline void store_u8x32(__m256i q, __m256 scale, __m256 min, float* dst) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int p = 0; p < 4; ++p) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
    _mm256_storeu_ps(dst + 8 * p, _mm256_sub_ps(_mm256_mul_ps(f, scale), min));
  }
}

// dst[0..16) = float(q[i]) * d for 16 signed bytes.
inline void store_i8x16(__m128i q, __m256 d, float* dst) {
  _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d));
}

void dequant_q8_0(const BlockQ8_0* b, int64_t nb, float* dst) {
  for (int64_t i = 0; i < nb; ++i, dst += 32) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(b[i].d));
    store_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)), d, dst);
    store_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16)), d, dst + 16);
  }
}

void dequant_q4_0(const BlockQ4_0* b, int64_t nb, float* dst) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < nb; ++i, dst += 32) {
    const __m256 d = _mm256_set1_ps(f16_to_f32(b[i].d));
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, mask), eight);                       // elements 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight);    // 16..31
    store_i8x16(lo, d, dst);
    store_i8x16(hi, d, dst + 16);
  }
}

// Q4_K and Q5_K: sub-block s of a super-block is scale[s] * q - min[s].
void k_scales_mins(uint16_t d, uint16_t dmin, const uint8_t* scales, float* scale, float* min) {
  uint64_t sc = 0, m = 0;
  q4_k_scales_mins(scales, &sc, &m);
  const float fd = f16_to_f32(d), fmin = f16_to_f32(dmin);
  for (int s = 0; s < 8; ++s) {
    scale[s] = fd * static_cast<float>((sc >> (8 * s)) & 0xFF);
    min[s] = fmin * static_cast<float>((m >> (8 * s)) & 0xFF);
  }
}

void dequant_q4_k(const BlockQ4_K* b, int64_t nb, float* dst) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i, dst += kQK_K) {
    float scale[8], min[8];
    k_scales_mins(b[i].d, b[i].dmin, b[i].scales, scale, min);
    for (int c = 0; c < 4; ++c) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      store_u8x32(_mm256_and_si256(raw, mask), _mm256_set1_ps(scale[2 * c]), _mm256_set1_ps(min[2 * c]),
                  dst + 64 * c);
      store_u8x32(_mm256_and_si256(_mm256_srli_epi16(raw, 4), mask), _mm256_set1_ps(scale[2 * c + 1]),
                  _mm256_set1_ps(min[2 * c + 1]), dst + 64 * c + 32);
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, int64_t nb, float* dst) {
  const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i, dst += kQK_K) {
    float scale[8], min[8];
    k_scales_mins(b[i].d, b[i].dmin, b[i].scales, scale, min);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh));
    for (int c = 0; c < 4; ++c) {  // fifth bits: bit 2c of qh[l] (low nibbles), bit 2c + 1 (high)
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
      const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(raw, mask), _mm256_slli_epi16(h0, 4));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), mask), _mm256_slli_epi16(h1, 4));
      store_u8x32(q0, _mm256_set1_ps(scale[2 * c]), _mm256_set1_ps(min[2 * c]), dst + 64 * c);
      store_u8x32(q1, _mm256_set1_ps(scale[2 * c + 1]), _mm256_set1_ps(min[2 * c + 1]), dst + 64 * c + 32);
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, int64_t nb, float* dst) {
  const __m256i mask4 = _mm256_set1_epi8(0x0F), mask2 = _mm256_set1_epi8(0x03), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i, dst += kQK_K) {
    const float d = f16_to_f32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      // The four groups of 32 elements of this half (blocks.h's table), q - 32 as int8.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, mask4), _mm256_slli_epi16(_mm256_and_si256(hb, mask2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, mask4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), mask2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mask4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), mask2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mask4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), mask2), 4)),
      };
      for (int j = 0; j < 4; ++j) {
        const int s = 8 * h + 2 * j;  // the two sub-blocks of 16 this group spans
        const __m256i v = _mm256_sub_epi8(q[j], off);
        float* out = dst + 128 * h + 32 * j;
        store_i8x16(_mm256_castsi256_si128(v), _mm256_set1_ps(d * static_cast<float>(b[i].scales[s])), out);
        store_i8x16(_mm256_extracti128_si256(v, 1), _mm256_set1_ps(d * static_cast<float>(b[i].scales[s + 1])),
                    out + 16);
      }
    }
  }
}

void dequant_f16(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void dequant_bf16(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

bool dequantize_simd(DType type, const uint8_t* src, int64_t nb, float* dst) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(nb) * sizeof(float)); return true;
    case DType::kF16: dequant_f16(reinterpret_cast<const uint16_t*>(src), nb, dst); return true;
    case DType::kBF16: dequant_bf16(reinterpret_cast<const uint16_t*>(src), nb, dst); return true;
    case DType::kQ8_0: dequant_q8_0(reinterpret_cast<const BlockQ8_0*>(src), nb, dst); return true;
    case DType::kQ4_0: dequant_q4_0(reinterpret_cast<const BlockQ4_0*>(src), nb, dst); return true;
    case DType::kQ4_K: dequant_q4_k(reinterpret_cast<const BlockQ4_K*>(src), nb, dst); return true;
    case DType::kQ5_K: dequant_q5_k(reinterpret_cast<const BlockQ5_K*>(src), nb, dst); return true;
    case DType::kQ6_K: dequant_q6_k(reinterpret_cast<const BlockQ6_K*>(src), nb, dst); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace sluice::cpu
