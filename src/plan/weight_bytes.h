// Weight bytes: what a model's weights cost to store and to read per step, by
// tensor class and format.
//
// A WeightFormat is a block geometry: block_size weights take block_bytes bytes,
// so block scales are part of the price (Q8_0 is 34 bytes per 32 weights, 8.5
// bits, not 8). The essays' idealized formats (fp8, int8, int4, int2: no scale
// overhead) are formats like any other, as is "bits:4.8" for a quoted average.
//
//   format   block  bytes  bits/weight
//   f32         1      4     32
//   f16/bf16    1      2     16
//   fp8/int8    1      1      8
//   int4        2      1      4
//   int2        4      1      2
//   q8_0       32     34      8.5
//   q6_k      256    210      6.5625
//   q4_0       32     18      4.5
//   q4_k      256    144      4.5
//   nf4        64     33      4.125   (4-bit codes + one 8-bit scale per 64)
//   q2_k      256     84      2.625
//
// WeightBytes holds stored bytes per class and answers "how many bytes does one
// forward step over n tokens read": every dense matrix once, one embedding row
// per token, and for MoE the expected number of distinct experts the tokens
// route to. It is built either from a shape and a FormatMix (planning), or from
// a model file's tensor directory (exact, the bytes the engine will touch).
// Plain values; pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "arch/tensor_class.h"
#include "format/model_file.h"
#include "plan/model_shape.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice::plan {

struct WeightFormat {
  std::string name = "bf16";
  int64_t block_size = 1;   // weights per block
  int64_t block_bytes = 2;  // bytes per block

  double bits_per_weight() const { return 8.0 * block_bytes / block_size; }
  double bytes_per_weight() const { return static_cast<double>(block_bytes) / block_size; }
  // Bytes of n weights (whole blocks).
  uint64_t bytes(int64_t n) const {
    return static_cast<uint64_t>((n + block_size - 1) / block_size) * static_cast<uint64_t>(block_bytes);
  }
};

// A GGUF tensor type's format (block geometry from dtype_traits).
WeightFormat format_of(DType type);
// Parses a format name from the table above, any sluice DType name, or
// "bits:X" (an average of X bits per weight, e.g. bits:4.8 for Q4_K_M).
StatusOr<WeightFormat> parse_weight_format(std::string_view name);

// The classes weights are counted by (arch/tensor_class.h).
using ::sluice::kNumTensorClasses;
using ::sluice::TensorClass;
using ::sluice::tensor_class_name;

// The format of each tensor class.
struct FormatMix {
  WeightFormat embedding;
  WeightFormat output;
  WeightFormat attention;
  WeightFormat ffn;      // dense FFN and shared experts
  WeightFormat experts;
  WeightFormat router;
  WeightFormat norm;
};
// Every matrix in `w`; norm vectors and the MoE router in f32 (as GGUF stores them).
FormatMix uniform_mix(const WeightFormat& w);

struct WeightBytes {
  std::array<uint64_t, kNumTensorClasses> stored{};  // bytes stored, by TensorClass
  uint64_t embedding_row_bytes = 0;  // one token's embedding row
  bool tied_embeddings = false;      // the output layer reads the embedding table
  int64_t n_layer = 0;
  int64_t n_layer_moe = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;

  uint64_t of(TensorClass c) const { return stored[static_cast<int>(c)]; }
  uint64_t total() const;
  // Bytes inside the transformer blocks (attention, FFN, experts, router, block norms).
  uint64_t block_bytes() const;
  // Block bytes averaged per layer (what a streamed layer costs to move).
  double layer_bytes() const { return static_cast<double>(block_bytes()) / n_layer; }
  // Expected distinct routed experts per MoE block that n_tokens tokens touch,
  // routing uniformly: E (1 - (1 - k/E)^n). 0 for a dense model.
  double experts_touched(int64_t n_tokens) const;
  // Weight-matrix bytes one forward step over n_tokens tokens reads: all dense
  // matrices, the output layer, n_tokens embedding rows (at most the table) and
  // the expected touched experts. Norm vectors excluded (see read_bytes).
  double matrix_read_bytes(int64_t n_tokens) const;
  // matrix_read_bytes plus the norm vectors.
  double read_bytes(int64_t n_tokens) const { return matrix_read_bytes(n_tokens) + static_cast<double>(of(TensorClass::kNorm)); }
};

WeightBytes weight_bytes(const ModelShape& shape, const FormatMix& mix);
// Exact bytes of a model file's tensors, classified by role (arch/tensor_class.h).
WeightBytes weight_bytes_of_file(const ModelFile& file, const ModelShape& shape);

}  // namespace sluice::plan
