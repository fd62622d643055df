// Float-weight matmul: activation conversion, the scalar kernels, and the
// (type, isa) -> kernel table. SIMD kernels live in float_matmul_avx2.cpp and
// float_matmul_avx512.cpp.
#include "backend/cpu/float_matmul.h"

#include <cstring>

#include "backend/cpu/matmul.h"
#include "base/half.h"

namespace sluice::cpu {
namespace {

// Group length of dot_row() for float types (quant/quant.h).
constexpr int64_t kGroup = 32;
// Tokens processed together by the scalar kernel (share one converted group).
constexpr int64_t kScalarTokens = 4;

int64_t padded(int64_t n_in, int64_t multiple) { return (n_in + multiple - 1) / multiple * multiple; }

// Scalar kernel in dot_row() order. load(src_row, i, n, out) converts weights
// [i, i + n) of a row to floats.
template <typename Load>
void rows_scalar(Load load, const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                 size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  float wg[kGroup];
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * w_row_bytes;
    for (int64_t t0 = 0; t0 < n_tok; t0 += kScalarTokens) {
      const int64_t nt = n_tok - t0 < kScalarTokens ? n_tok - t0 : kScalarTokens;
      float total[kScalarTokens] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t g = 0; g < n_in; g += kGroup) {
        const int64_t len = n_in - g < kGroup ? n_in - g : kGroup;
        load(row, g, len, wg);
        for (int64_t t = 0; t < nt; ++t) {
          const float* x = reinterpret_cast<const float*>(xa + static_cast<size_t>(t0 + t) * xa_stride) + g;
          float partial = 0.0f;
          for (int64_t i = 0; i < len; ++i) partial += wg[i] * x[i];
          total[t] += partial;
        }
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = total[t];
    }
  }
}

// The load of a row of 16-bit floats (f16 or bf16, by ToF32) for rows_scalar.
template <float (*ToF32)(uint16_t)>
void load_halves(const uint8_t* row, int64_t i, int64_t n, float* out) {
  for (int64_t k = 0; k < n; ++k) {
    uint16_t h;
    std::memcpy(&h, row + (i + k) * 2, 2);
    out[k] = ToF32(h);
  }
}

MatmulKernel f32_act_kernel(RowsFn* rows, const char* name) {
  return MatmulKernel{.act_row_bytes = float_act_row_bytes_f32,
                      .convert_act = float_convert_act_f32,
                      .rows = rows,
                      .name = name};
}

}  // namespace

size_t float_act_row_bytes_f32(int64_t n_in) {
  return static_cast<size_t>(padded(n_in, kFloatActPadF32)) * sizeof(float);
}

void float_convert_act_f32(const float* x, void* dst, int64_t n_in) {
  auto* d = static_cast<float*>(dst);
  std::memcpy(d, x, static_cast<size_t>(n_in) * sizeof(float));
  for (int64_t i = n_in; i < padded(n_in, kFloatActPadF32); ++i) d[i] = 0.0f;
}

size_t float_act_row_bytes_bf16(int64_t n_in) {
  return static_cast<size_t>(padded(n_in, kFloatActPadBF16)) * sizeof(uint16_t);
}

void float_convert_act_bf16(const float* x, void* dst, int64_t n_in) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n_in; ++i) d[i] = f32_to_bf16(x[i]);
  for (int64_t i = n_in; i < padded(n_in, kFloatActPadBF16); ++i) d[i] = 0;
}

void float_rows_f32_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  auto load = [](const uint8_t* row, int64_t i, int64_t n, float* out) {
    std::memcpy(out, row + i * 4, static_cast<size_t>(n) * 4);
  };
  rows_scalar(load, w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_f16_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                           size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows_scalar(load_halves<f16_to_f32>, w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

void float_rows_bf16_scalar(const uint8_t* w, size_t w_row_bytes, int64_t n_in, const uint8_t* xa,
                            size_t xa_stride, int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  rows_scalar(load_halves<bf16_to_f32>, w, w_row_bytes, n_in, xa, xa_stride, n_tok, y, y_stride, r0, r1);
}

MatmulKernel float_matmul_kernel(DType type, Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      switch (type) {
        case DType::kF32: return f32_act_kernel(float_rows_f32_scalar, "f32/scalar");
        case DType::kF16: return f32_act_kernel(float_rows_f16_scalar, "f16/scalar");
        case DType::kBF16: return f32_act_kernel(float_rows_bf16_scalar, "bf16/scalar");
        default: return MatmulKernel{};
      }
    case Isa::kAvx2:
      switch (type) {
        case DType::kF32: return f32_act_kernel(float_rows_f32_avx2, "f32/avx2");
        case DType::kF16: return f32_act_kernel(float_rows_f16_avx2, "f16/avx2");
        case DType::kBF16: return f32_act_kernel(float_rows_bf16_avx2, "bf16/avx2");
        default: return MatmulKernel{};
      }
    case Isa::kAvx512:
      switch (type) {
        case DType::kF32: return f32_act_kernel(float_rows_f32_avx512, "f32/avx512");
        case DType::kF16: return f32_act_kernel(float_rows_f16_avx512, "f16/avx512");
        case DType::kBF16:
          if (cpu_features().avx512_bf16) {
            return MatmulKernel{.act_row_bytes = float_act_row_bytes_bf16,
                                .convert_act = float_convert_act_bf16,
                                .rows = float_rows_bf16dp_avx512,
                                .name = "bf16/avx512-bf16"};
          }
          return f32_act_kernel(float_rows_bf16_avx512, "bf16/avx512");
        default: return MatmulKernel{};
      }
  }
  return MatmulKernel{};
}

}  // namespace sluice::cpu
