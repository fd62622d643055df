// Where Q4_0 / Q8_0 blocks are and how they are read, for the kernels that
// multiply them with 8-bit x (cuda_matmul_q8.cu's dp4a GEMV, cuda_mmq.cu's
// tensor-core small GEMM). Included by .cu files only.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_fp16.h>

#include "backend/cuda/cuda_loads.cuh"
#include "backend/cuda/cuda_matmul_q8.cuh"
#include "backend/op_types.h"
#include "base/check.h"

namespace sluice::cuda {

// Where a row's blocks are. GGUF rows: block b at q + b * (2 + QB), its scale
// first. Split scales: its quants at q + b * QB (16-byte aligned), its scale at d[b].
struct RowAt {
  const uint8_t* q;
  const uint16_t* d;
};

// Row `local` of a matrix in GGUF rows of n_in / kElems blocks of kBytes each.
template <int kElems, int kBytes>
__device__ __forceinline__ RowAt block_row(const uint8_t* w, int64_t local, int64_t n_in) {
  return {w + local * (n_in / kElems) * kBytes, nullptr};
}

template <bool Q8>
constexpr int kQuantBytes = Q8 ? 32 : 16;  // quant bytes of a block

// Row `local` of a matrix of n_rows rows at w.
template <bool Q8, bool Split>
__device__ __forceinline__ RowAt row_at(const uint8_t* w, int64_t local, int64_t n_rows, int n_blocks) {
  constexpr int kQB = kQuantBytes<Q8>;
  if constexpr (Split) {
    const uint8_t* scales = w + n_rows * n_blocks * kQB;
    return {w + local * n_blocks * kQB, reinterpret_cast<const uint16_t*>(scales) + local * n_blocks};
  } else {
    return {w + local * n_blocks * (kQB + 2), nullptr};
  }
}

// Up to kMaxParts matrices of one type and width sharing x (q/k/v, gate/up),
// their rows one after the other: part p covers global rows [end[p-1], end[p]).
constexpr int kMaxParts = 4;
struct Parts {
  const uint8_t* w[kMaxParts] = {};
  float* y[kMaxParts] = {};        // [n_tok, its n_out]
  int64_t end[kMaxParts] = {};
  int64_t stride[kMaxParts] = {};  // y row stride
  int n = 0;
};

// The same outputs and quantized x from token t0 on (a launch's pass over
// the next tokens).
inline Parts from_token(Parts p, int64_t t0) {
  for (int i = 0; i < p.n; ++i) p.y[i] += t0 * p.stride[i];
  return p;
}
inline QuantizedX from_token(QuantizedX x, int64_t t0) {
  x.q += t0 * x.n_in;
  x.d += t0 * (x.n_in / 32);
  x.s += t0 * (x.n_in / 32);
  return x;
}

__device__ __forceinline__ int part_of(const Parts& p, int64_t g) {
  int i = 0;
#pragma unroll
  for (int k = 0; k < kMaxParts - 1; ++k) i += (k < p.n - 1 && g >= p.end[k]) ? 1 : 0;
  return i;
}

// The parts of one 8-bit launch over ws (1..kMaxParts matrices that
// matmul_q8_takes, of one type, layout and width, read against x of qx_n_in
// columns; CHECKed) into *parts; returns their rows together.
inline int64_t q8_parts(std::span<const WeightView> ws, std::span<float* const> ys, int64_t qx_n_in, Parts* parts) {
  CHECK(!ws.empty() && ws.size() <= static_cast<size_t>(kMaxParts) && ws.size() == ys.size());
  int64_t end = 0;
  for (size_t p = 0; p < ws.size(); ++p) {
    CHECK(matmul_q8_takes(ws[p]) && ws[p].type == ws[0].type && ws[p].layout == ws[0].layout &&
          ws[p].n_in == ws[0].n_in && qx_n_in >= ws[p].n_in);
    end += ws[p].n_out;
    parts->w[p] = ws[p].data;
    parts->y[p] = ys[p];
    parts->end[p] = end;
    parts->stride[p] = ws[p].n_out;
  }
  parts->n = static_cast<int>(ws.size());
  return end;
}

// f.template operator()<Q8, Split>() for a Q4_0 / Q8_0 type and its layout.
template <class F>
void with_q8_layout(DType type, WeightLayout layout, F&& f) {
  const bool q8 = type == DType::kQ8_0, split = layout == WeightLayout::kSplitScales;
  if (q8 && split) f.template operator()<true, true>();
  else if (q8) f.template operator()<true, false>();
  else if (split) f.template operator()<false, true>();
  else f.template operator()<false, false>();
}

// An 8-bit launch over ws (q8_parts) against x as quantized:
// f(parts, n_in, n_out), unless there is nothing to compute.
template <class F>
void with_q8_parts(std::span<const WeightView> ws, std::span<float* const> ys, const QuantizedX& qx, int64_t n_tok,
                   F&& f) {
  Parts parts;
  const int64_t n_out = q8_parts(ws, ys, qx.n_in, &parts);
  if (n_out == 0 || n_tok == 0) return;
  f(parts, ws[0].n_in, n_out);
}

}  // namespace sluice::cuda
