// Matmul kernels for float weights (F32, F16, BF16): the per-isa entry points
// behind float_matmul_kernel() (declared in backend/cpu/matmul.h).
//
// Activation formats (what convert_act writes, one token per xa row):
//   f32:  n_in floats, zero-padded to a multiple of kFloatActPadF32 (one
//         AVX-512 vector), so the SIMD inner loops read whole vectors of x
//         without a tail case; at most 60 bytes longer than n_in floats.
//   bf16: n_in bf16 values (round to nearest even), zero-padded to a multiple
//         of kFloatActPadBF16 (one vdpbf16ps operand);
//         only for BF16 weights at AVX-512 when the CPU has AVX512_BF16
//         (vdpbf16ps). Rounding the activations to bf16 costs ~2^-9 relative
//         error per element, so y has a normalized squared error of ~1e-6
//         against an f32-activation dot (the tests bound it by 2e-5); the
//         products themselves are exact and accumulate in f32. Denormal inputs
//         are flushed to zero by the instruction.
//
// Accumulation order, per (row r, token t), identical in every code path of one
// kernel (single token, register tiles of any shape, any r0/r1 split):
//   scalar:  dot_row() order (quant/quant.h): partial sums over groups of 32
//            elements in element order, each added to a float total.
//   avx2:    8-lane vectors; for each block of 256 elements a fresh accumulator
//            takes fma over i = kb, kb+8, ... (the last vector of the row is
//            zero-padded), then is added to a running total vector; the total's
//            lanes are reduced as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
//   avx512:  the same with 16 lanes and masked tails; reduced by halving
//            (512 -> 256 -> 128 -> 64 -> 32 bits).
//   bf16dp:  one 16-lane accumulator, vdpbf16ps over i = 0, 32, ...; masked
//            tail; reduced like avx512.
// So y[t][r] has the same bits whatever n_tok, tile or split (matmul.h contract).
//
// Weight rows are read only in [r0, r1) and never past the row's last element
// (tails use masked or copied loads). Nothing allocates; all functions are
// thread-safe (pure).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/rows_fn.h"

namespace sluice::cpu {

// Activation rows are padded with zeros to a multiple of this many elements.
constexpr int64_t kFloatActPadF32 = 16;
constexpr int64_t kFloatActPadBF16 = 32;

// Every float_rows_* is a RowsFn (rows_fn.h): the scalar ones functions, the
// SIMD ones constant pointers to their level's instance of the shared tiles and
// driver (float_matmul_simd.h).

// Activation conversion (baseline code, float_matmul.cpp).
size_t float_act_row_bytes_f32(int64_t n_in);
void float_convert_act_f32(const float* x, void* dst, int64_t n_in);
size_t float_act_row_bytes_bf16(int64_t n_in);
void float_convert_act_bf16(const float* x, void* dst, int64_t n_in);

// Scalar (float_matmul.cpp): bit-identical to dot_row() for every (row, token).
RowsFn float_rows_f32_scalar;
RowsFn float_rows_f16_scalar;
RowsFn float_rows_bf16_scalar;

// AVX2 + FMA + F16C (float_matmul_avx2.cpp); f32 activations.
extern RowsFn* const float_rows_f32_avx2;
extern RowsFn* const float_rows_f16_avx2;
extern RowsFn* const float_rows_bf16_avx2;

// AVX-512 (float_matmul_avx512.cpp); f32 activations except bf16dp.
extern RowsFn* const float_rows_f32_avx512;
extern RowsFn* const float_rows_f16_avx512;
extern RowsFn* const float_rows_bf16_avx512;
// bf16 activations (float_convert_act_bf16), vdpbf16ps: needs AVX512_BF16.
extern RowsFn* const float_rows_bf16dp_avx512;

}  // namespace sluice::cpu
