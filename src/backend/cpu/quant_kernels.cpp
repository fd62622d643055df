// quant_matmul_kernel(): picks the activation format and the rows() function of
// a quantized weight type at one instruction-set level (kernels: quant_rows.h),
// from one table entry per type.
#include "backend/cpu/act_quant.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_rows.h"
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

// Activation conversions at the three levels, indexed by Isa, by the weight
// offset their lane corrections are made for.
constexpr ConvertFn kActQ8_0[3] = {act_q8_0_scalar, act_q8_0_avx2, act_q8_0_avx512};
constexpr ConvertFn kActQ4_0[3] = {act_q4_0_scalar, act_q4_0_avx2, act_q4_0_avx512};
constexpr ConvertFn kActQSum[3] = {act_qsum_scalar, act_qsum_avx2, act_qsum_avx512};
constexpr ConvertFn kActQ5_0[3] = {act_q5_0_scalar, act_q5_0_avx2, act_q5_0_avx512};
constexpr ConvertFn kActPlain[3] = {act_plain_scalar, act_plain_avx2, act_plain_avx512};
constexpr ConvertFn kAct256[3] = {convert_act_q8x256_scalar, convert_act_q8x256_avx2, convert_act_q8x256_avx512};

// The three levels' functions of one type (or repacked layout), indexed by Isa;
// a null rows is no kernel at that level. rows point at the kernel constants
// of quant_rows.h, so that these tables are constant-initialized.
struct Family {
  size_t (*act_row_bytes)(int64_t);
  const ConvertFn* convert;
  const QuantRowsFn* rows[3];
  const char* names[3];
};

constexpr Family kQ4_0x4 = {act_row_bytes_q8x64, kActQ4_0,
                            {&quant_rows_q4_0x4_scalar, nullptr, &quant_rows_q4_0x4_avx512},
                            {"q4_0x4/scalar-int8", "", "q4_0x4/avx512-vnni"}};
constexpr Family kQ4_0x8 = {act_row_bytes_q8x64, kActQ4_0,
                            {&quant_rows_q4_0x8_scalar, &quant_rows_q4_0x8_avx2, nullptr},
                            {"q4_0x8/scalar-int8", "q4_0x8/avx2-int8", ""}};
constexpr Family kQ8_0x8 = {act_row_bytes_q8x64, kActQ8_0,
                            {&quant_rows_q8_0x8_scalar, &quant_rows_q8_0x8_avx2, nullptr},
                            {"q8_0x8/scalar-int8", "q8_0x8/avx2-int8", ""}};
constexpr Family kQ8_0x16 = {act_row_bytes_q8x64, kActQ8_0,
                             {&quant_rows_q8_0x16_scalar, nullptr, &quant_rows_q8_0x16_avx512},
                             {"q8_0x16/scalar-int8", "", "q8_0x16/avx512-vnni"}};

// The int8 kernels of each quantized type in GGUF rows: the dispatch entry of
// the type's DTypeTraits row (quant/dtype.h). A type missing here runs on no
// int8 kernel (matmul_supports() is false unless a float kernel takes it).
struct TypeKernels {
  DType type;
  Family family;
};
constexpr TypeKernels kTypeKernels[] = {
    // Blocks of 32 elements (quant_rows32_*.cpp), activations ActQ8x64.
    {DType::kQ4_0, {act_row_bytes_q8x64, kActQ4_0,
                    {&quant_rows_q4_0_scalar, &quant_rows_q4_0_avx2, &quant_rows_q4_0_avx512},
                    {"q4_0/scalar-int8", "q4_0/avx2-int8", "q4_0/avx512-vnni"}}},
    {DType::kQ4_1, {act_row_bytes_q8x64, kActQSum,
                    {&quant_rows_q4_1_scalar, &quant_rows_q4_1_avx2, &quant_rows_q4_1_avx512},
                    {"q4_1/scalar-int8", "q4_1/avx2-int8", "q4_1/avx512-vnni"}}},
    {DType::kQ5_0, {act_row_bytes_q8x64, kActQ5_0,
                    {&quant_rows_q5_0_scalar, &quant_rows_q5_0_avx2, &quant_rows_q5_0_avx512},
                    {"q5_0/scalar-int8", "q5_0/avx2-int8", "q5_0/avx512-vnni"}}},
    {DType::kQ5_1, {act_row_bytes_q8x64, kActQSum,
                    {&quant_rows_q5_1_scalar, &quant_rows_q5_1_avx2, &quant_rows_q5_1_avx512},
                    {"q5_1/scalar-int8", "q5_1/avx2-int8", "q5_1/avx512-vnni"}}},
    {DType::kQ8_0, {act_row_bytes_q8x64, kActQ8_0,
                    {&quant_rows_q8_0_scalar, &quant_rows_q8_0_avx2, &quant_rows_q8_0_avx512},
                    {"q8_0/scalar-int8", "q8_0/avx2-int8", "q8_0/avx512-vnni"}}},
    {DType::kIQ4_NL, {act_row_bytes_q8x64, kActPlain,
                      {&quant_rows_iq4_nl_scalar, &quant_rows_iq4_nl_avx2, &quant_rows_iq4_nl_avx512},
                      {"iq4_nl/scalar-int8", "iq4_nl/avx2-int8", "iq4_nl/avx512-vnni"}}},
    // Super-blocks of 256 (quant_rows256_*.cpp), activations ActQ8x256.
    {DType::kQ2_K, {act_row_bytes_q8x256, kAct256,
                    {&quant_rows_q2_k_scalar, &quant_rows_q2_k_avx2, &quant_rows_q2_k_avx512},
                    {"q2_K/scalar-int8", "q2_K/avx2-int8", "q2_K/avx512-vnni"}}},
    {DType::kQ3_K, {act_row_bytes_q8x256, kAct256,
                    {&quant_rows_q3_k_scalar, &quant_rows_q3_k_avx2, &quant_rows_q3_k_avx512},
                    {"q3_K/scalar-int8", "q3_K/avx2-int8", "q3_K/avx512-vnni"}}},
    {DType::kQ4_K, {act_row_bytes_q8x256, kAct256,
                    {&quant_rows_q4_k_scalar, &quant_rows_q4_k_avx2, &quant_rows_q4_k_avx512},
                    {"q4_K/scalar-int8", "q4_K/avx2-int8", "q4_K/avx512-vnni"}}},
    {DType::kQ5_K, {act_row_bytes_q8x256, kAct256,
                    {&quant_rows_q5_k_scalar, &quant_rows_q5_k_avx2, &quant_rows_q5_k_avx512},
                    {"q5_K/scalar-int8", "q5_K/avx2-int8", "q5_K/avx512-vnni"}}},
    {DType::kQ6_K, {act_row_bytes_q8x256, kAct256,
                    {&quant_rows_q6_k_scalar, &quant_rows_q6_k_avx2, &quant_rows_q6_k_avx512},
                    {"q6_K/scalar-int8", "q6_K/avx2-int8", "q6_K/avx512-vnni"}}},
    {DType::kIQ4_XS, {act_row_bytes_q8x256, kAct256,
                      {&quant_rows_iq4_xs_scalar, &quant_rows_iq4_xs_avx2, &quant_rows_iq4_xs_avx512},
                      {"iq4_xs/scalar-int8", "iq4_xs/avx2-int8", "iq4_xs/avx512-vnni"}}},
};

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
    for (const TypeKernels& k : kTypeKernels)
      if (k.type == type) f = &k.family;
    if (f == nullptr) return MatmulKernel{};  // a float type, or one with no int8 kernels
  }
  const int i = static_cast<int>(isa);
  if (f->rows[i] == nullptr) return MatmulKernel{};  // none at this level: the caller falls back
  return MatmulKernel{.act_row_bytes = f->act_row_bytes, .convert_act = f->convert[i],
                      .rows = *f->rows[i], .name = f->names[i]};
}

}  // namespace sluice::cpu
