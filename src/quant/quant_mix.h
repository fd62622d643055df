// Weight-type choices by name, shared by `sluice synth --type` and `sluice
// convert --type`: either one DType for every weight matrix ("q8_0", "q5_k",
// "iq4_nl", ...) or one of llama.cpp's named mixes ("q4_k_m", "q3_k_s", ...),
// which give some tensors more bits than the base type. The per-tensor rules of
// the mixes are documented (as facts about llama-quantize) in docs/QUANT_MIXES.md
// and checked against files llama.cpp wrote (tests/quant_zoo_test.cpp).
// Plain values and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "arch/arch_spec.h"
#include "quant/dtype.h"
#include "sluice/status.h"

namespace sluice {

struct QuantMix {
  std::string name;     // as given, lower case: "q4_k_m", "q8_0", ...
  DType base;           // the type of every matrix no rule promotes
  bool is_mix = false;  // false: every matrix is `base`
  int64_t file_type;    // llama.cpp's general.file_type (llama_ftype) for the name
};

// The tensor a type is chosen for; `name` is its GGUF name ("blk.3.attn_v.weight"),
// which the rules read as a layer and a role of `arch` (arch/tensor_class.h
// find_tensor_spec; nullptr: any supported architecture's table).
struct MixTensor {
  std::string_view name;
  const ArchSpec* arch = nullptr;
  int64_t ne0 = 0;      // row length (elements)
  int64_t n_layer = 0;  // blocks in the model
  int64_t n_gqa = 1;    // query heads per KV head
  bool has_output = true;  // false: token_embd is also the output matrix (tied)
};

// Parses a --type value (case-insensitive). Names of llama.cpp mixes (q2_k,
// q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_xs) are the
// mix; every other DType name (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
// q3_k, q4_k, q5_k, iq4_nl) means that type for every matrix.
StatusOr<QuantMix> quant_mix_from_name(std::string_view name);

// The names quant_mix_from_name accepts, for messages: "f32, f16, ...".
std::string quant_mix_names();

// The type of one weight matrix under `mix`, in *type: for a plain type `base`;
// for a mix, llama.cpp's rule for the tensor, then its fallback for rows that do
// not split into 256-element super-blocks (Q2_K/Q3_K/IQ4_XS -> IQ4_NL,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0). Returns false (and leaves *type)
// when the chosen type's block does not divide ne0: the caller keeps the tensor.
bool quant_mix_type(const QuantMix& mix, const MixTensor& t, DType* type);

// Whether `layer` of n_layer is one llama.cpp's *_M mixes give more bits
// (the first and last eighth, and every third layer between).
bool mix_uses_more_bits(int64_t layer, int64_t n_layer);

}  // namespace sluice
