// quant_matmul_kernel(): picks the activation format and the rows() function of
// a quantized weight type at one instruction-set level (see quant_matmul.h).
#include "backend/cpu/quant_matmul.h"

#include "backend/cpu/act_quant.h"
#include "backend/cpu/matmul.h"

namespace sluice::cpu {
namespace {

// Weight offsets the ActQ8x64 lane corrections are computed for (act_quant.h).
constexpr int32_t kQ8_0Offset = 128;  // w ^ 0x80 == w + 128
constexpr int32_t kQ4_0Offset = 8;    // nibble == w + 8

void act_q8_0_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQ8_0Offset); }
void act_q8_0_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQ8_0Offset); }
void act_q8_0_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQ8_0Offset); }
void act_q4_0_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQ4_0Offset); }
void act_q4_0_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQ4_0Offset); }
void act_q4_0_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQ4_0Offset); }

using ConvertFn = void (*)(const float*, void*, int64_t);
using RowsFn = decltype(MatmulKernel::rows);

// The three levels' functions of one type, indexed by Isa.
struct Family {
  size_t (*act_row_bytes)(int64_t);
  ConvertFn convert[3];
  RowsFn rows[3];
  const char* names[3];
};

const Family kQ8_0 = {act_row_bytes_q8x64,
                      {act_q8_0_scalar, act_q8_0_avx2, act_q8_0_avx512},
                      {quant_rows_q8_0_scalar, quant_rows_q8_0_avx2, quant_rows_q8_0_avx512},
                      {"q8_0/scalar-int8", "q8_0/avx2-int8", "q8_0/avx512-vnni"}};
const Family kQ4_0 = {act_row_bytes_q8x64,
                      {act_q4_0_scalar, act_q4_0_avx2, act_q4_0_avx512},
                      {quant_rows_q4_0_scalar, quant_rows_q4_0_avx2, quant_rows_q4_0_avx512},
                      {"q4_0/scalar-int8", "q4_0/avx2-int8", "q4_0/avx512-vnni"}};
const Family kQ4_0x4 = {act_row_bytes_q8x64,
                        {act_q4_0_scalar, act_q4_0_avx2, act_q4_0_avx512},
                        {quant_rows_q4_0x4_scalar, quant_rows_q4_0x4_avx2, quant_rows_q4_0x4_avx512},
                        {"q4_0x4/scalar-int8", "q4_0x4/avx2-int8", "q4_0x4/avx512-vnni"}};
const Family kQ8_0x4 = {act_row_bytes_q8x64,
                        {act_q8_0_scalar, act_q8_0_avx2, act_q8_0_avx512},
                        {quant_rows_q8_0x4_scalar, quant_rows_q8_0x4_avx2, nullptr},
                        {"q8_0x4/scalar-int8", "q8_0x4/avx2-int8", ""}};
const Family kQ8_0x16 = {act_row_bytes_q8x64,
                         {act_q8_0_scalar, act_q8_0_avx2, act_q8_0_avx512},
                         {quant_rows_q8_0x16_scalar, nullptr, quant_rows_q8_0x16_avx512},
                         {"q8_0x16/scalar-int8", "", "q8_0x16/avx512-vnni"}};
const Family kQ4_K = {act_row_bytes_q8x256,
                      {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                      {quant_rows_q4_k_scalar, quant_rows_q4_k_avx2, quant_rows_q4_k_avx512},
                      {"q4_K/scalar-int8", "q4_K/avx2-int8", "q4_K/avx512-vnni"}};
const Family kQ6_K = {act_row_bytes_q8x256,
                      {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                      {quant_rows_q6_k_scalar, quant_rows_q6_k_avx2, quant_rows_q6_k_avx512},
                      {"q6_K/scalar-int8", "q6_K/avx2-int8", "q6_K/avx512-vnni"}};

}  // namespace

MatmulKernel quant_matmul_kernel(DType type, Isa isa, WeightLayout layout) {
  const Family* f = nullptr;
  if (layout == WeightLayout::kQ4_0x4) {
    if (type != DType::kQ4_0) return MatmulKernel{};
    f = &kQ4_0x4;
  } else if (layout == WeightLayout::kQ8_0x4) {
    if (type != DType::kQ8_0) return MatmulKernel{};
    f = &kQ8_0x4;
  } else if (layout == WeightLayout::kQ8_0x16) {
    if (type != DType::kQ8_0) return MatmulKernel{};
    f = &kQ8_0x16;
  } else
  switch (type) {
      case DType::kQ8_0: f = &kQ8_0; break;
      case DType::kQ4_0: f = &kQ4_0; break;
      case DType::kQ4_K: f = &kQ4_K; break;
      case DType::kQ6_K: f = &kQ6_K; break;
      default: return MatmulKernel{};
    }
  const int i = static_cast<int>(isa);
  if (f->rows[i] == nullptr) return MatmulKernel{};  // none at this level: the caller falls back
  return MatmulKernel{.act_row_bytes = f->act_row_bytes, .convert_act = f->convert[i],
                      .rows = f->rows[i], .name = f->names[i]};
}

}  // namespace sluice::cpu
