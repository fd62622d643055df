// Scale searches used by the K-quant reference quantizers (Q4_K, Q6_K).
//
// Both pick, for one small group of values, the scale (and for the "type-1"
// search also the min) that minimizes a weighted squared reconstruction error,
// by trying a grid of candidate inverse scales around the naive one and solving
// the weighted least-squares problem for the integer assignment each induces.
// They follow the algorithms of ggml's reference K-quantizers so that files we
// quantize have the same error characteristics as llama.cpp's. Pure functions,
// thread-safe, no allocation.
#pragma once

#include <cstdint>

namespace sluice {

// Groups whose largest magnitude is below this are treated as all zero.
inline constexpr float kGroupMaxEps = 1e-15f;

// "Type-1" search: x ~= scale * q - min_out with q in [0, nmax], min_out >= 0.
// x, weights: [n]; q_out: [n] the chosen quants; q_tmp: [n] scratch.
// Candidate inverse scales are (nmax + rmin + rdelta * i) / (max - min) for
// i in [0, n_steps]; n_steps == 0 keeps the naive min/max scale.
// Returns the scale; *min_out is the (non-negative) offset subtracted.
float search_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* q_out,
                       uint8_t* q_tmp, float* min_out, float rmin, float rdelta, int n_steps);

// "Type-0" search: x ~= scale * (q - nmax) with q in [0, 2 * nmax - 1], weights x^2.
// The element of largest magnitude maps to -nmax. x: [n]; q_out: [n].
// n_steps candidate offsets on each side of the naive inverse scale (0: naive only).
// Returns the scale (may be negative); 0 and all q = nmax for an all-zero group.
float search_scale_symmetric(int n, int nmax, const float* x, uint8_t* q_out, int n_steps);

// Weighted squared error sum_i w_i * (scale * q_i - min - x_i)^2 of a type-1 fit.
float weighted_error_type1(int n, const float* x, const float* weights, const uint8_t* q,
                           float scale, float min);

}  // namespace sluice
