// DType: the element/block types a tensor can have, numbered as in GGUF
// (ggml_type), plus their block geometry.
//
// A row of n elements of a block type takes (n / block_size) * block_bytes bytes;
// n must be a multiple of block_size. Layouts (see quant/blocks.h):
//
//   type   block_size  block_bytes  bits/weight
//   F32        1           4          32
//   F16        1           2          16
//   BF16       1           2          16
//   Q8_0      32          34           8.5   [f16 d][32 x int8 q]
//   Q4_0      32          18           4.5   [f16 d][16 bytes: q[i] | q[i+16] << 4]
//   Q4_K     256         144           4.5   super-block of 8 x 32, 6-bit scales/mins
//   Q6_K     256         210           6.5625 super-block of 16 x 16, 8-bit scales
//   Q4_1      32          20           5     [f16 d][f16 m][16 bytes of nibbles]
//   Q5_0      32          22           5.5   [f16 d][4 bytes fifth bits][16 bytes]
//   Q5_1      32          24           6     [f16 d][f16 m][4 bytes][16 bytes]
//   Q2_K     256          84           2.625 super-block of 16 x 16, 4-bit scales/mins
//   Q3_K     256         110           3.4375 super-block of 16 x 16, 6-bit scales
//   Q5_K     256         176           5.5   as Q4_K plus a fifth bit per element
//   IQ4_NL    32          18           4.5   [f16 d][16 bytes of codebook indices]
//   IQ4_XS   256         136           4.25  8 x 32, 6-bit scales, codebook indices
// (Q4_1 .. IQ4_XS layouts: quant/blocks_more.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

// One row per supported type: everything about the type that is not a kernel of
// one backend. The loader and the GGUF writer read the id, name and geometry;
// quant.h's reference functions, the quant mixes (quant_mix.h), synth and the
// planner read the rest from here. The CPU backend's int8 kernels for a type
// are found by its id in backend/cpu/quant_kernels.cpp; CUDA reads block_size
// and block_bytes from the row (through row_bytes()).
struct DTypeTraits {
  DType type;          // also its GGUF type id (ggml_type)
  const char* name;    // as llama.cpp prints it: "f32", "q4_K", ...
  int64_t block_size;  // elements per block
  int64_t block_bytes; // bytes per block
  // llama_ftype of a file whose matrices are all of this type ("general.file_type").
  int64_t file_type;
  // What a quant mix writes instead when a row's length is not a multiple of
  // block_size (llama.cpp's choice; the type itself for 32-element blocks).
  DType small_row_fallback;
  // The scalar reference functions, with the contracts of quant.h's
  // dequantize_row / quantize_row / dot_row (n a multiple of block_size).
  void (*dequantize)(const void* src, float* dst, int64_t n);
  void (*quantize)(const float* src, void* dst, int64_t n);
  float (*dot)(const void* w, const float* x, int64_t n);
};

// Traits of a supported type.
const DTypeTraits& dtype_traits(DType type);
inline const char* dtype_name(DType type) { return dtype_traits(type).name; }
// Every supported type's row, in GGUF id order.
std::span<const DTypeTraits> all_dtype_traits();

// Maps a raw GGUF type id to a supported DType; nullopt for types sluice does not
// support (the caller reports them by name via ggml_type_name()).
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
// Name of any ggml type id, supported or not ("q5_K", "iq2_xxs", ... or "type#N").
std::string ggml_type_name(uint32_t ggml_type);
// Parses "f32", "F16", "q8_0", "Q4_K", ... (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_bytes(DType type, int64_t n) {
  const DTypeTraits& t = dtype_traits(type);
  return static_cast<size_t>(n / t.block_size * t.block_bytes);
}

}  // namespace sluice
