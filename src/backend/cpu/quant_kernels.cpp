// quant_matmul_kernel(): picks the activation format and the rows() function of
// a quantized weight type at one instruction-set level (see quant_matmul.h).
#include "backend/cpu/quant_matmul.h"

#include "backend/cpu/act_quant.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_matmul_more.h"
#include "backend/cpu/repack.h"

namespace sluice::cpu {
namespace {

// Weight offsets the ActQ8x64 lane corrections are computed for (act_quant.h).
constexpr int32_t kQ8_0Offset = 128;  // w ^ 0x80 == w + 128
constexpr int32_t kQ4_0Offset = 8;    // nibble == w + 8
constexpr int32_t kQSumOffset = -1;   // Q4_1, Q5_1: corr = +sum of the lane's q (the m term)
constexpr int32_t kQ5_0Offset = 16;   // 5-bit u == w + 16
constexpr int32_t kNoOffset = 0;      // IQ4_NL: signed codebook values, no correction

void act_q8_0_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQ8_0Offset); }
void act_q8_0_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQ8_0Offset); }
void act_q8_0_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQ8_0Offset); }
void act_q4_0_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQ4_0Offset); }
void act_q4_0_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQ4_0Offset); }
void act_q4_0_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQ4_0Offset); }

void act_qsum_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQSumOffset); }
void act_qsum_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQSumOffset); }
void act_qsum_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQSumOffset); }
void act_q5_0_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kQ5_0Offset); }
void act_q5_0_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kQ5_0Offset); }
void act_q5_0_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kQ5_0Offset); }
void act_plain_scalar(const float* x, void* dst, int64_t n) { convert_act_q8x64_scalar(x, dst, n, kNoOffset); }
void act_plain_avx2(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx2(x, dst, n, kNoOffset); }
void act_plain_avx512(const float* x, void* dst, int64_t n) { convert_act_q8x64_avx512(x, dst, n, kNoOffset); }

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
                        {quant_rows_q4_0x4_scalar, nullptr, quant_rows_q4_0x4_avx512},
                        {"q4_0x4/scalar-int8", "", "q4_0x4/avx512-vnni"}};
const Family kQ4_0x8 = {act_row_bytes_q8x64,
                        {act_q4_0_scalar, act_q4_0_avx2, act_q4_0_avx512},
                        {quant_rows_q4_0x8_scalar, quant_rows_q4_0x8_avx2, nullptr},
                        {"q4_0x8/scalar-int8", "q4_0x8/avx2-int8", ""}};
const Family kQ8_0x8 = {act_row_bytes_q8x64,
                        {act_q8_0_scalar, act_q8_0_avx2, act_q8_0_avx512},
                        {quant_rows_q8_0x8_scalar, quant_rows_q8_0x8_avx2, nullptr},
                        {"q8_0x8/scalar-int8", "q8_0x8/avx2-int8", ""}};
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

// The types of quant_matmul_more.h.
constexpr ConvertFn kQSum[3] = {act_qsum_scalar, act_qsum_avx2, act_qsum_avx512};
constexpr ConvertFn kQ5_0Act[3] = {act_q5_0_scalar, act_q5_0_avx2, act_q5_0_avx512};
constexpr ConvertFn kPlain[3] = {act_plain_scalar, act_plain_avx2, act_plain_avx512};
const Family kQ4_1 = {act_row_bytes_q8x64,
                      {kQSum[0], kQSum[1], kQSum[2]},
                      {quant_rows_q4_1_scalar, quant_rows_q4_1_avx2, quant_rows_q4_1_avx512},
                      {"q4_1/scalar-int8", "q4_1/avx2-int8", "q4_1/avx512-vnni"}};
const Family kQ5_0 = {act_row_bytes_q8x64,
                      {kQ5_0Act[0], kQ5_0Act[1], kQ5_0Act[2]},
                      {quant_rows_q5_0_scalar, quant_rows_q5_0_avx2, quant_rows_q5_0_avx512},
                      {"q5_0/scalar-int8", "q5_0/avx2-int8", "q5_0/avx512-vnni"}};
const Family kQ5_1 = {act_row_bytes_q8x64,
                      {kQSum[0], kQSum[1], kQSum[2]},
                      {quant_rows_q5_1_scalar, quant_rows_q5_1_avx2, quant_rows_q5_1_avx512},
                      {"q5_1/scalar-int8", "q5_1/avx2-int8", "q5_1/avx512-vnni"}};
const Family kIQ4_NL = {act_row_bytes_q8x64,
                        {kPlain[0], kPlain[1], kPlain[2]},
                        {quant_rows_iq4_nl_scalar, quant_rows_iq4_nl_avx2, quant_rows_iq4_nl_avx512},
                        {"iq4_nl/scalar-int8", "iq4_nl/avx2-int8", "iq4_nl/avx512-vnni"}};
const Family kQ2_K = {act_row_bytes_q8x256,
                      {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                      {quant_rows_q2_k_scalar, quant_rows_q2_k_avx2, quant_rows_q2_k_avx512},
                      {"q2_K/scalar-int8", "q2_K/avx2-int8", "q2_K/avx512-vnni"}};
const Family kQ3_K = {act_row_bytes_q8x256,
                      {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                      {quant_rows_q3_k_scalar, quant_rows_q3_k_avx2, quant_rows_q3_k_avx512},
                      {"q3_K/scalar-int8", "q3_K/avx2-int8", "q3_K/avx512-vnni"}};
const Family kQ5_K = {act_row_bytes_q8x256,
                      {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                      {quant_rows_q5_k_scalar, quant_rows_q5_k_avx2, quant_rows_q5_k_avx512},
                      {"q5_K/scalar-int8", "q5_K/avx2-int8", "q5_K/avx512-vnni"}};
const Family kIQ4_XS = {act_row_bytes_q8x256,
                        {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512},
                        {quant_rows_iq4_xs_scalar, quant_rows_iq4_xs_avx2, quant_rows_iq4_xs_avx512},
                        {"iq4_xs/scalar-int8", "iq4_xs/avx2-int8", "iq4_xs/avx512-vnni"}};

}  // namespace

MatmulKernel quant_matmul_kernel(DType type, Isa isa, WeightLayout layout) {
  const Family* f = nullptr;
  if (layout == WeightLayout::kSplitScales) return MatmulKernel{};  // the CUDA backend's layout
  if (layout != WeightLayout::kRows) {
    if (type != repacked_type(layout)) return MatmulKernel{};
    switch (layout) {
      case WeightLayout::kQ4_0x4: f = &kQ4_0x4; break;
      case WeightLayout::kQ4_0x8: f = &kQ4_0x8; break;
      case WeightLayout::kQ8_0x8: f = &kQ8_0x8; break;
      case WeightLayout::kQ8_0x16: f = &kQ8_0x16; break;
      case WeightLayout::kRows:
      case WeightLayout::kSplitScales: break;
    }
  } else {
    switch (type) {
      case DType::kQ8_0: f = &kQ8_0; break;
      case DType::kQ4_0: f = &kQ4_0; break;
      case DType::kQ4_K: f = &kQ4_K; break;
      case DType::kQ6_K: f = &kQ6_K; break;
      case DType::kQ4_1: f = &kQ4_1; break;
      case DType::kQ5_0: f = &kQ5_0; break;
      case DType::kQ5_1: f = &kQ5_1; break;
      case DType::kIQ4_NL: f = &kIQ4_NL; break;
      case DType::kQ2_K: f = &kQ2_K; break;
      case DType::kQ3_K: f = &kQ3_K; break;
      case DType::kQ5_K: f = &kQ5_K; break;
      case DType::kIQ4_XS: f = &kIQ4_XS; break;
      default: return MatmulKernel{};
    }
  }
  const int i = static_cast<int>(isa);
  if (f->rows[i] == nullptr) return MatmulKernel{};  // none at this level: the caller falls back
  return MatmulKernel{.act_row_bytes = f->act_row_bytes, .convert_act = f->convert[i],
                      .rows = f->rows[i], .name = f->names[i]};
}

}  // namespace sluice::cpu
