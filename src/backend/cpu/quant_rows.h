// Integer-dot-product matmul kernels for quantized weights, behind
// quant_matmul_kernel() (declared in backend/cpu/matmul.h; the per-type table
// of them is quant_kernels.cpp). Files by family and level:
//
//   blocks of 32 (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL)   quant_rows32_{scalar,avx2,avx512}.cpp,
//       and the repacked layouts: quant_rows32_x8_avx2.cpp, quant_rows32_x16_avx512.cpp
//   super-blocks of 256 (Q2_K .. Q6_K, IQ4_XS)       quant_rows256_{scalar,avx2,avx512}.cpp
//
// Activations are quantized to int8 first (act_quant.h): ActQ8x64 for the
// 32-element types, ActQ8x256 for the 256-element ones (the granularity of
// llama.cpp's Q8_0 and Q8_K). Each weight block times its activation block is
// then an exact integer; only block scales are floats. Per block, with ad the
// activation scale and qsum the sum of its int8 quants:
//
//   Q8_0        y += wd * ad * sum(w * q)
//   Q4_0        y += wd * ad * sum((n - 8) * q)                 n: nibble 0..15
//   Q4_1, Q5_1  y += float(sum n * q) * (d * ad) + m * (ad * float(qsum))
//   Q5_0        y += float(sum (n - 16) * q) * (d * ad)
//   IQ4_NL      y += float(sum v[n] * q) * (d * ad)             v: kIq4NlValues
//   Q4_K, Q2_K, Q5_K
//               y += float(sum_s sc_s * sum(n * q)) * (d * ad) - float(sum_s m_s * qsum_s) * (dmin * ad)
//   Q3_K        y += float(sum_s (sc_s - 32) * sum((n - 4) * q)) * (d * ad)
//   Q6_K        y += d * ad * sum_s(sc_s * (sum(u * q) - 32 * qsum_s))    u: 6-bit 0..63
//   IQ4_XS      y += float(sum_s (ls_s - 32) * sum(v[n] * q)) * (d * ad)
//
// The ActQ8x64 lane corrections are made for the offsets the SIMD kernels use
// (quant_kernels.cpp): 128 for Q8_0, 8 for Q4_0, -1 for Q4_1 and Q5_1 (corr =
// +qsum per lane), 16 for Q5_0, 0 for IQ4_NL. The scalar kernels compute qsum
// themselves.
//
// The integer parts are equal at every level; the levels differ in how they hold
// partial sums in lanes and add floats. Within one level every (row, token) takes
// the same operations whatever the tile it falls in (the rows() functions run
// one templated tile code for 1 token and for batches), so the matmul.h
// contract holds bit for bit. All functions have the signature and contract of
// MatmulKernel::rows (matmul.h), are thread-safe and allocate nothing:
//   w:  [n_out rows of w_row_bytes]   xa: [n_tok, xa_stride bytes]   y: [n_tok, y_stride]
// and write y[t * y_stride + r] for r in [r0, r1), t in [0, n_tok).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/rows_fn.h"

namespace sluice::cpu {

// The signature of MatmulKernel::rows. Each kernel is a constant naming one
// instantiation of its family's tile template (or a driver of its own).
using QuantRowsFn = RowsFn*;

// ------------------------------------------------------------ blocks of 32 --

// Scalar (quant_rows32_scalar.cpp): one (row, token) at a time; per block the
// integer dot, then total += float(isum) * (scales), in block order.
extern const QuantRowsFn quant_rows_q4_0_scalar;
extern const QuantRowsFn quant_rows_q4_1_scalar;
extern const QuantRowsFn quant_rows_q5_0_scalar;
extern const QuantRowsFn quant_rows_q5_1_scalar;
extern const QuantRowsFn quant_rows_q8_0_scalar;
extern const QuantRowsFn quant_rows_iq4_nl_scalar;

// AVX2: maddubs + madd on 8 int32 lanes. Q8_0 and Q4_0 in
// quant_rows32_x8_avx2.cpp (one row per lane as x8 records), the others in
// quant_rows32_avx2.cpp (tiles of rows x tokens, quant_tile_avx2.h).
extern const QuantRowsFn quant_rows_q4_0_avx2;
extern const QuantRowsFn quant_rows_q4_1_avx2;
extern const QuantRowsFn quant_rows_q5_0_avx2;
extern const QuantRowsFn quant_rows_q5_1_avx2;
extern const QuantRowsFn quant_rows_q8_0_avx2;
extern const QuantRowsFn quant_rows_iq4_nl_avx2;

// AVX-512 VNNI: vpdpbusd / vpdpwssd on 16 int32 lanes, two blocks per zmm, tiles
// of rows x tokens (quant_tile_avx512.h). Q8_0 in quant_rows32_x16_avx512.cpp,
// the others in quant_rows32_avx512.cpp.
extern const QuantRowsFn quant_rows_q4_0_avx512;
extern const QuantRowsFn quant_rows_q4_1_avx512;
extern const QuantRowsFn quant_rows_q5_0_avx512;
extern const QuantRowsFn quant_rows_q5_1_avx512;
extern const QuantRowsFn quant_rows_q8_0_avx512;
extern const QuantRowsFn quant_rows_iq4_nl_avx512;

// Q4_0 repacked to WeightLayout::kQ4_0x4 (repack.h): n_in % 64 == 0, r0 and r1
// multiples of 4; w_row_bytes is row_bytes(kQ4_0, n_in) (a group of 4 rows is 4
// of them). Each level gives the same bits as its quant_rows_q4_0_* on the GGUF
// rows the matrix was repacked from. No AVX2 kernel: that level repacks Q4_0
// to kQ4_0x8.
extern const QuantRowsFn quant_rows_q4_0x4_scalar;
extern const QuantRowsFn quant_rows_q4_0x4_avx512;

// Q8_0 repacked to WeightLayout::kQ8_0x8 (n_in % 32 == 0, r0 and r1 multiples
// of 8): the AVX2 kernel gives the same bits as quant_rows_q8_0_avx2 on the GGUF
// rows (which stages them into these records); the scalar one the same bits as
// quant_rows_q8_0_scalar. At AVX-512, Q8_0 is repacked to kQ8_0x16 instead.
extern const QuantRowsFn quant_rows_q8_0x8_scalar;
extern const QuantRowsFn quant_rows_q8_0x8_avx2;

// Q4_0 repacked to WeightLayout::kQ4_0x8 (n_in % 32 == 0, r0 and r1 multiples
// of 8), as Q8_0x8: the AVX2 kernel gives the bits of quant_rows_q4_0_avx2 on
// the GGUF rows, the scalar one those of quant_rows_q4_0_scalar.
extern const QuantRowsFn quant_rows_q4_0x8_scalar;
extern const QuantRowsFn quant_rows_q4_0x8_avx2;

// Q8_0 repacked to WeightLayout::kQ8_0x16 (n_in % 32 == 0, r0 and r1 multiples
// of 16): the AVX-512 kernel gives the same bits as quant_rows_q8_0_avx512 on the
// GGUF rows (which stages them into these records); the scalar one the same bits
// as quant_rows_q8_0_scalar. There is no AVX2 kernel for it: the AVX2 level
// repacks Q8_0 to kQ8_0x8 (repack_layout).
extern const QuantRowsFn quant_rows_q8_0x16_scalar;
extern const QuantRowsFn quant_rows_q8_0x16_avx512;

// ----------------------------------------------------- super-blocks of 256 --

// Scalar (quant_rows256_scalar.cpp): one (row, token) at a time, blocks in order.
extern const QuantRowsFn quant_rows_q2_k_scalar;
extern const QuantRowsFn quant_rows_q3_k_scalar;
extern const QuantRowsFn quant_rows_q4_k_scalar;
extern const QuantRowsFn quant_rows_q5_k_scalar;
extern const QuantRowsFn quant_rows_q6_k_scalar;
extern const QuantRowsFn quant_rows_iq4_xs_scalar;

// AVX2 (quant_rows256_avx2.cpp): maddubs + madd on 8 int32 lanes, tiles of rows
// x tokens (quant_tile_avx2.h).
extern const QuantRowsFn quant_rows_q2_k_avx2;
extern const QuantRowsFn quant_rows_q3_k_avx2;
extern const QuantRowsFn quant_rows_q4_k_avx2;
extern const QuantRowsFn quant_rows_q5_k_avx2;
extern const QuantRowsFn quant_rows_q6_k_avx2;
extern const QuantRowsFn quant_rows_iq4_xs_avx2;

// AVX-512 VNNI (quant_rows256_avx512.cpp): 64 elements of a super-block per zmm,
// vpdpbusd / vpdpwssd on 16 int32 lanes, tiles of rows x tokens
// (quant_tile_avx512.h).
extern const QuantRowsFn quant_rows_q2_k_avx512;
extern const QuantRowsFn quant_rows_q3_k_avx512;
extern const QuantRowsFn quant_rows_q4_k_avx512;
extern const QuantRowsFn quant_rows_q5_k_avx512;
extern const QuantRowsFn quant_rows_q6_k_avx512;
extern const QuantRowsFn quant_rows_iq4_xs_avx512;

}  // namespace sluice::cpu
