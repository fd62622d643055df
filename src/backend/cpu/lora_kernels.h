// The two halves of an adapter's low-rank term (Backend::lora, LoraArgs) for
// one token, at each instruction-set level:
//
//   down:  u[r] = A[r] . x             r in [r0, r1)     A: [rank, n_in]
//   up:    y[o] += scale * (B[o] . u)  o in [o0, o1)     B: [n_out, rank]
//
// Arithmetic per output element (u[r] or y[o]) is fixed by its index alone,
// never by the range it is computed in or by other tokens, so a token alone
// gives the bits it gives in a batch and any split over threads gives the
// same bits:
//   scalar:  float sums in element order.
//   avx2:    down: one 8-lane accumulator per row, fma over i = 0, 8, ...
//            (masked tail), lanes reduced by avx2::hsum. up: one 8-lane
//            accumulator per output over r = 0, 8, ... (masked tail), the
//            eight outputs of each aligned group of 8 reduced together
//            (hsum8x8), outputs past the last full group one by one (hsum);
//            callers split o only at multiples of 8 (kLoraUpAlign).
// AVX-512 machines run the AVX2 kernels: the term is a few percent of a
// matmul's bytes, bound by memory, not by vector width.
//
// Pure functions on their arguments; thread-safe on disjoint outputs.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_features.h"

namespace sluice::cpu {

// Output ranges of lora_up start at multiples of this (the avx2 grouping).
constexpr int64_t kLoraUpAlign = 8;

//   a: [rank, n_in];  x: [n_in];  u: [rank] (u[r0 .. r1) written)
void lora_down(const float* a, const float* x, int64_t n_in, int64_t r0, int64_t r1, float* u,
               Isa isa = active_isa());
//   b: [n_out, rank];  u: [rank];  y: [n_out] (y[o0 .. o1) +=);  o0 % kLoraUpAlign == 0
void lora_up(const float* b, const float* u, int64_t rank, float scale, int64_t o0, int64_t o1, float* y,
             Isa isa = active_isa());

// The AVX2 + FMA kernels (lora_kernels_avx2.cpp); call only when the CPU has them.
void lora_down_avx2(const float* a, const float* x, int64_t n_in, int64_t r0, int64_t r1, float* u);
void lora_up_avx2(const float* b, const float* u, int64_t rank, float scale, int64_t o0, int64_t o1, float* y);

}  // namespace sluice::cpu
