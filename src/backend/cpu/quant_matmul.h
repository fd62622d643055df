// Integer-dot-product matmul kernels for quantized weights (Q8_0, Q4_0, Q4_K,
// Q6_K) behind quant_matmul_kernel() (declared in backend/cpu/matmul.h).
//
// Activations are quantized to int8 first (act_quant.h): ActQ8x64 for Q8_0/Q4_0,
// ActQ8x256 for Q4_K/Q6_K. Each weight block times its activation block is then
// an exact integer; only block scales are floats:
//
//   Q8_0  y += wd * ad * sum(w * q)                       (per block of 32)
//   Q4_0  y += wd * ad * sum((n - 8) * q)                 n: nibble 0..15
//   Q4_K  y += d * ad * sum_s(sc_s * sum(n * q)) - dmin * ad * sum_s(m_s * qsum_s)
//   Q6_K  y += d * ad * sum_s(sc_s * (sum(u * q) - 32 * qsum_s))    u: 6-bit 0..63
//
// The integer parts are equal at every level; the levels differ in how they hold
// partial sums in lanes and add floats. Within one level every (row, token) takes
// the same operations whatever the tile it falls in (the rows() functions below
// run one templated tile code for 1 token and for batches), so the matmul.h
// contract holds bit for bit. All functions have the signatures of MatmulKernel
// fields, are thread-safe and allocate nothing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::cpu {

// Each function has the signature and contract of MatmulKernel::rows (matmul.h):
//   w:  [n_out rows of w_row_bytes]   xa: [n_tok, xa_stride bytes]   y: [n_tok, y_stride]
// and writes y[t * y_stride + r] for r in [r0, r1), t in [0, n_tok).

// Scalar (quant_matmul_scalar.cpp): one (row, token) at a time; per block the
// integer dot, then total += float(isum) * (scales), in block order.
void quant_rows_q8_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_0_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q6_k_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// Q4_0 repacked to WeightLayout::kQ4_0x4 (repack.h): n_in % 64 == 0, r0 and r1
// multiples of 4; w_row_bytes is row_bytes(kQ4_0, n_in) (a group of 4 rows is 4
// of them). Each level gives the same bits as its quant_rows_q4_0_* on the GGUF
// rows the matrix was repacked from. No AVX2 kernel: that level repacks Q4_0
// to kQ4_0x8.
void quant_rows_q4_0x4_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_0x4_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// Q8_0 repacked to WeightLayout::kQ8_0x8 (n_in % 32 == 0, r0 and r1 multiples
// of 8): the AVX2 kernel gives the same bits as quant_rows_q8_0_avx2 on the GGUF
// rows (which stages them into these records); the scalar one the same bits as
// quant_rows_q8_0_scalar. At AVX-512, Q8_0 is repacked to kQ8_0x16 instead.
void quant_rows_q8_0x8_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q8_0x8_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// Q4_0 repacked to WeightLayout::kQ4_0x8 (n_in % 32 == 0, r0 and r1 multiples
// of 8), as Q8_0x8: the AVX2 kernel gives the bits of quant_rows_q4_0_avx2 on
// the GGUF rows, the scalar one those of quant_rows_q4_0_scalar.
void quant_rows_q4_0x8_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_0x8_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// Q8_0 repacked to WeightLayout::kQ8_0x16 (n_in % 32 == 0, r0 and r1 multiples
// of 16): the AVX-512 kernel gives the same bits as quant_rows_q8_0_avx512 on the
// GGUF rows (which stages them into these records); the scalar one the same bits
// as quant_rows_q8_0_scalar. There is no AVX2 kernel for it: the AVX2 level
// repacks Q8_0 to kQ8_0x8 (repack_layout).
void quant_rows_q8_0x16_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q8_0x16_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// AVX2 (quant_matmul_avx2.cpp): maddubs + madd on 8 int32 lanes, tiles of rows x
// tokens; Q8_0 and Q4_0 in quant_x8_avx2.cpp, one row per lane as x8 records.
void quant_rows_q8_0_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_0_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q6_k_avx2(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

// AVX-512 VNNI (quant_matmul_avx512.cpp): vpdpbusd / vpdpwssd, 512-bit vectors, tiles.
void quant_rows_q8_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_0_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q4_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
void quant_rows_q6_k_avx512(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
    size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);

}  // namespace sluice::cpu
