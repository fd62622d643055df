#include "quant/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

#include "base/check.h"
#include "base/half.h"
#include "quant/blocks.h"
#include "quant/blocks_more.h"

namespace sluice {
namespace {

// Group length of the float-type dot product (see dot_row in quant.h).
constexpr int64_t kFloatDotGroup = 32;
constexpr int64_t kMaxBlockSize = 256;  // the largest block (K-quant super-block)

// The float types' reference functions.
void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n) { f32_to_f16_array(src, static_cast<uint16_t*>(dst), n); }
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

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
float dot_f32(const void* w, const float* x, int64_t n) {
  const auto* f = static_cast<const float*>(w);
  return grouped_dot([f](int64_t i) { return f[i]; }, x, n);
}
float dot_f16(const void* w, const float* x, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(w);
  return grouped_dot([h](int64_t i) { return f16_to_f32(h[i]); }, x, n);
}
float dot_bf16(const void* w, const float* x, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(w);
  return grouped_dot([h](int64_t i) { return bf16_to_f32(h[i]); }, x, n);
}

// A typed reference function (quant/blocks.h, blocks_more.h) behind the untyped row signature.
template <typename Block, void (*F)(const Block*, float*, int64_t)>
void dequantize_as(const void* src, float* dst, int64_t n) { F(static_cast<const Block*>(src), dst, n); }
template <typename Block, void (*F)(const float*, Block*, int64_t)>
void quantize_as(const float* src, void* dst, int64_t n) { F(src, static_cast<Block*>(dst), n); }

// Dot of a block-type row by dequantizing one block at a time: the grouped sum
// over dequantize_row's output that dot_row promises.
template <typename Block, void (*Dequantize)(const Block*, float*, int64_t), int64_t kBlockSize>
float block_dot(const void* w, const float* x, int64_t n) {
  static_assert(kBlockSize <= kMaxBlockSize);
  const auto* blocks = static_cast<const Block*>(w);
  float block[kMaxBlockSize];
  float total = 0.0f;
  for (int64_t b = 0; b < n / kBlockSize; ++b) {
    Dequantize(blocks + b, block, kBlockSize);
    const float* xb = x + b * kBlockSize;
    float partial = 0.0f;
    for (int64_t i = 0; i < kBlockSize; ++i) partial += block[i] * xb[i];
    total += partial;
  }
  return total;
}

// A block type's row from its typed reference functions; block_bytes is
// sizeof(Block) (blocks.h asserts each against GGUF).
template <typename Block, int64_t kBlockSize, void (*Dequantize)(const Block*, float*, int64_t),
          void (*Quantize)(const float*, Block*, int64_t)>
constexpr DTypeTraits block_row(DType type, const char* name, int64_t file_type, DType small_row_fallback) {
  return {type, name, kBlockSize, static_cast<int64_t>(sizeof(Block)), file_type, small_row_fallback,
          dequantize_as<Block, Dequantize>, quantize_as<Block, Quantize>,
          block_dot<Block, Dequantize, kBlockSize>};
}

// The rows, in GGUF id order. A new type: its enum value (dtype.h), its block
// struct and typed reference functions (declared in quant/blocks_more.h,
// defined in quant/quant_<type>.cpp), and a row here (docs/ARCHITECTURE.md,
// "adding a quant type"). file_type: llama_ftype;
// q3_K, q4_K and q5_K have none of their own and take their _S mix's.
constexpr DTypeTraits kTraits[] = {
    {DType::kF32, "f32", 1, 4, 0, DType::kF32, dequantize_f32, quantize_f32, dot_f32},
    {DType::kF16, "f16", 1, 2, 1, DType::kF16, dequantize_f16, quantize_f16, dot_f16},
    block_row<BlockQ4_0, 32, dequantize_row_q4_0, quantize_row_q4_0>(DType::kQ4_0, "q4_0", 2, DType::kQ4_0),
    block_row<BlockQ4_1, 32, dequantize_row_q4_1, quantize_row_q4_1>(DType::kQ4_1, "q4_1", 3, DType::kQ4_1),
    block_row<BlockQ5_0, 32, dequantize_row_q5_0, quantize_row_q5_0>(DType::kQ5_0, "q5_0", 8, DType::kQ5_0),
    block_row<BlockQ5_1, 32, dequantize_row_q5_1, quantize_row_q5_1>(DType::kQ5_1, "q5_1", 9, DType::kQ5_1),
    block_row<BlockQ8_0, 32, dequantize_row_q8_0, quantize_row_q8_0>(DType::kQ8_0, "q8_0", 7, DType::kQ8_0),
    block_row<BlockQ2_K, 256, dequantize_row_q2_k, quantize_row_q2_k>(DType::kQ2_K, "q2_K", 10, DType::kIQ4_NL),
    block_row<BlockQ3_K, 256, dequantize_row_q3_k, quantize_row_q3_k>(DType::kQ3_K, "q3_K", 11, DType::kIQ4_NL),
    block_row<BlockQ4_K, 256, dequantize_row_q4_k, quantize_row_q4_k>(DType::kQ4_K, "q4_K", 14, DType::kQ5_0),
    block_row<BlockQ5_K, 256, dequantize_row_q5_k, quantize_row_q5_k>(DType::kQ5_K, "q5_K", 16, DType::kQ5_1),
    block_row<BlockQ6_K, 256, dequantize_row_q6_k, quantize_row_q6_k>(DType::kQ6_K, "q6_K", 18, DType::kQ8_0),
    block_row<BlockIq4Nl, 32, dequantize_row_iq4_nl, quantize_row_iq4_nl>(DType::kIQ4_NL, "iq4_nl", 25,
                                                                         DType::kIQ4_NL),
    block_row<BlockIq4Xs, 256, dequantize_row_iq4_xs, quantize_row_iq4_xs>(DType::kIQ4_XS, "iq4_xs", 30,
                                                                          DType::kIQ4_NL),
    {DType::kBF16, "bf16", 1, 2, 32, DType::kBF16, dequantize_bf16, quantize_bf16, dot_bf16},
};

// ggml type ids 0..39 by name, for messages about types sluice refuses.
constexpr std::array<const char*, 40> kGgmlNames = {
    "f32",  "f16",  "q4_0",    "q4_1",    "q4_2",   "q4_3",    "q5_0",   "q5_1",
    "q8_0", "q8_1", "q2_K",    "q3_K",    "q4_K",   "q5_K",    "q6_K",   "q8_K",
    "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s", "iq4_xs",
    "i8",   "i16",  "i32",     "i64",     "f64",    "iq1_m",   "bf16",   "q4_0_4_4",
    "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4"};

}  // namespace

const DTypeTraits& dtype_traits(DType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  CHECK(false && "unknown DType");
  return kTraits[0];
}

std::span<const DTypeTraits> all_dtype_traits() { return kTraits; }

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (const auto& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == ggml_type) return t.type;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t ggml_type) {
  if (ggml_type < kGgmlNames.size()) return kGgmlNames[ggml_type];
  return "type#" + std::to_string(ggml_type);
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits) {
    std::string_view tn = t.name;
    if (tn.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < tn.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(tn[i])) !=
          std::tolower(static_cast<unsigned char>(name[i]))) {
        eq = false;
        break;
      }
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

}  // namespace sluice
