#include "quant/quant.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/quant_iq4.h"
#include "quant/quant_k_low.h"
#include "quant/quant_q4_0.h"
#include "quant/quant_q4_1_q5.h"
#include "quant/quant_q4_k.h"
#include "quant/quant_q5_k.h"
#include "quant/quant_q6_k.h"
#include "quant/quant_q8_0.h"

namespace sluice {
namespace {

// Group length of the float-type dot product (see dot_row in quant.h).
constexpr int64_t kFloatDotGroup = 32;
constexpr int64_t kMaxBlockSize = 256;  // the largest block (K-quant super-block)

// Dot of a float-convertible row in groups of kFloatDotGroup; to_f32(i) gives w_i.
template <typename ToF32>
float grouped_dot(ToF32 to_f32, const float* x, int64_t n) {
  float total = 0.0f;
  for (int64_t g = 0; g < n; g += kFloatDotGroup) {
    const int64_t end = std::min(n, g + kFloatDotGroup);
    float partial = 0.0f;
    for (int64_t i = g; i < end; ++i) partial += to_f32(i) * x[i];
    total += partial;
  }
  return total;
}

// Dot of a block-type row by dequantizing one block at a time: bit-identical to
// the grouped sum over dequantize_row's output that dot_row promises.
float block_dot(DType type, const void* w, const float* x, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  const auto* bytes = static_cast<const uint8_t*>(w);
  float block[kMaxBlockSize];
  float total = 0.0f;
  for (int64_t b = 0; b < n / t.block_size; ++b) {
    dequantize_row(type, bytes + b * t.block_bytes, block, t.block_size);
    const float* xb = x + b * t.block_size;
    float partial = 0.0f;
    for (int64_t i = 0; i < t.block_size; ++i) partial += block[i] * xb[i];
    total += partial;
  }
  return total;
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  CHECK(n >= 0 && n % dtype_traits(type).block_size == 0);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::kQ8_0:
      return dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case DType::kQ4_0:
      return dequantize_row_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case DType::kQ4_K:
      return dequantize_row_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::kQ6_K:
      return dequantize_row_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::kQ4_1:
      return dequantize_row_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case DType::kQ5_0:
      return dequantize_row_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case DType::kQ5_1:
      return dequantize_row_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case DType::kQ2_K:
      return dequantize_row_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case DType::kQ3_K:
      return dequantize_row_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case DType::kQ5_K:
      return dequantize_row_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::kIQ4_NL:
      return dequantize_row_iq4_nl(static_cast<const BlockIq4Nl*>(src), dst, n);
    case DType::kIQ4_XS:
      return dequantize_row_iq4_xs(static_cast<const BlockIq4Xs*>(src), dst, n);
  }
  CHECK(false && "unhandled DType");
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  CHECK(n >= 0 && n % dtype_traits(type).block_size == 0);
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      f32_to_f16_array(src, static_cast<uint16_t*>(dst), n);
      return;
    case DType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0:
      return quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case DType::kQ4_0:
      return quantize_row_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case DType::kQ4_K:
      return quantize_row_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ6_K:
      return quantize_row_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::kQ4_1:
      return quantize_row_q4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::kQ5_0:
      return quantize_row_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::kQ5_1:
      return quantize_row_q5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::kQ2_K:
      return quantize_row_q2_k(src, static_cast<BlockQ2_K*>(dst), n);
    case DType::kQ3_K:
      return quantize_row_q3_k(src, static_cast<BlockQ3_K*>(dst), n);
    case DType::kQ5_K:
      return quantize_row_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::kIQ4_NL:
      return quantize_row_iq4_nl(src, static_cast<BlockIq4Nl*>(dst), n);
    case DType::kIQ4_XS:
      return quantize_row_iq4_xs(src, static_cast<BlockIq4Xs*>(dst), n);
  }
  CHECK(false && "unhandled DType");
}

float dot_row(DType type, const void* w, const float* x, int64_t n) {
  CHECK(n >= 0 && n % dtype_traits(type).block_size == 0);
  switch (type) {
    case DType::kF32: {
      const auto* f = static_cast<const float*>(w);
      return grouped_dot([f](int64_t i) { return f[i]; }, x, n);
    }
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(w);
      return grouped_dot([h](int64_t i) { return f16_to_f32(h[i]); }, x, n);
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(w);
      return grouped_dot([h](int64_t i) { return bf16_to_f32(h[i]); }, x, n);
    }
    case DType::kQ8_0:
      return dot_row_q8_0(static_cast<const BlockQ8_0*>(w), x, n);
    case DType::kQ4_0:
      return dot_row_q4_0(static_cast<const BlockQ4_0*>(w), x, n);
    case DType::kQ4_K:
      return dot_row_q4_k(static_cast<const BlockQ4_K*>(w), x, n);
    case DType::kQ6_K:
      return dot_row_q6_k(static_cast<const BlockQ6_K*>(w), x, n);
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      return block_dot(type, w, x, n);
  }
  CHECK(false && "unhandled DType");
  return 0.0f;
}

size_t quantize_tensor(DType type, const float* src, void* dst, int64_t n_rows,
                       int64_t n_per_row) {
  CHECK(n_rows >= 0 && n_per_row % dtype_traits(type).block_size == 0);
  const size_t row_size = row_bytes(type, n_per_row);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_row(type, src + r * n_per_row, out + static_cast<size_t>(r) * row_size, n_per_row);
  }
  return static_cast<size_t>(n_rows) * row_size;
}

}  // namespace sluice
