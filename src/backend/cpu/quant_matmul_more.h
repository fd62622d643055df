// Integer-dot-product matmul kernels for the further quantized weight types
// (Q4_1, Q5_0, Q5_1, IQ4_NL on blocks of 32; Q2_K, Q3_K, Q5_K, IQ4_XS on
// super-blocks of 256), behind quant_matmul_kernel() like those of
// quant_matmul.h and under the same contract (matmul.h).
//
// Activations: ActQ8x64 for the 32-element types, ActQ8x256 for the 256-element
// ones (act_quant.h); the same granularity as llama.cpp's Q8_0/Q8_1 and Q8_K, so
// results match it up to float summation order. Per block, with ad the
// activation scale and qsum the sum of its int8 quants:
//
//   Q4_1, Q5_1  y += float(sum n * q) * (d * ad) + m * (ad * float(qsum))
//   Q5_0        y += float(sum (n - 16) * q) * (d * ad)
//   IQ4_NL      y += float(sum v[n] * q) * (d * ad)          v: kIq4NlValues
//   Q2_K, Q5_K  y += float(sum_s sc_s * sum(n * q)) * (d * ad)
//                  - float(sum_s m_s * qsum_s) * (dmin * ad)
//   Q3_K        y += float(sum_s (sc_s - 32) * sum((n - 4) * q)) * (d * ad)
//   IQ4_XS      y += float(sum_s (ls_s - 32) * sum(v[n] * q)) * (d * ad)
//
// The ActQ8x64 lane corrections are made for the offsets the SIMD kernels use
// (quant_matmul.cpp): -1 for Q4_1 and Q5_1 (corr = +qsum per lane), 16 for
// Q5_0, 0 for IQ4_NL. The scalar kernels compute qsum themselves.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::cpu {

// Each has the signature and contract of MatmulKernel::rows (matmul.h):
//   w:  [n_out rows of w_row_bytes]   xa: [n_tok, xa_stride bytes]   y: [n_tok, y_stride]
// and writes y[t * y_stride + r] for r in [r0, r1), t in [0, n_tok).

// Scalar (quant_matmul_more_scalar.cpp): one (row, token) at a time, blocks in order.
void quant_rows_q4_1_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_1_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_nl_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q2_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q3_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_xs_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// AVX2 (quant_matmul_more_avx2.cpp): maddubs + madd on 8 int32 lanes, tiles of
// rows x tokens (quant_tile_avx2.h).
void quant_rows_q4_1_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_0_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_1_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_nl_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q2_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q3_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_xs_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// AVX-512 VNNI (quant_matmul_more_avx512.cpp): two 32-element blocks or 64
// elements of a super-block per zmm, vpdpbusd / vpdpwssd on 16 int32 lanes,
// tiles of 4 rows x 4 tokens (quant_tile_avx512.h).
void quant_rows_q4_1_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_1_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_nl_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q2_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q3_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q5_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_iq4_xs_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

}  // namespace sluice::cpu
