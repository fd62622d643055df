// TensorClass: the coarse class of a tensor role, the one classification of
// tensors by what they do that the planner (plan/weight_bytes.h), the GGUF
// writer (`sluice convert`), the quant mixes (quant/quant_mix.h) and the tools
// read instead of matching fragments of GGUF names.
//
//   class      roles
//   embedding  token_embd
//   output     output (the LM head)
//   attention  attn_q/k/v/output, attn_qkv, the q/k/v biases
//   ffn        dense ffn_gate/up/down, ffn_up (gate+up), the shared expert's matrices
//   experts    ffn_{gate,up,down}_exps (stacked routed experts)
//   router     ffn_gate_inp, ffn_gate_inp_shexp (routing and the shared expert's gate)
//   norm       every RMSNorm weight, and the small f32 vectors beside them
//              (rope_freqs, LongRoPE factors)
//
// Plain constant data; every function is pure and thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "arch/arch_spec.h"

namespace sluice {

enum class TensorClass : uint8_t { kEmbedding, kOutput, kAttention, kFfn, kExperts, kRouter, kNorm };
inline constexpr int kNumTensorClasses = 7;

// The class of a role (every role but kCount has one).
TensorClass tensor_class(TensorRole role);
// "embedding", "output", "attention", "ffn", "experts", "router", "norm".
const char* tensor_class_name(TensorClass c);

// The spec a GGUF tensor name stands for: in arch's table, else (or with arch
// nullptr: a file of an architecture sluice does not run) in the first
// supported architecture's table that names it; nullptr for a name no table
// has. GGUF names are shared across llama.cpp's architectures, so the role
// found is the same whichever table names it (up to fused matrices, which
// keep their class).
const TensorSpec* find_tensor_spec(const ArchSpec* arch, std::string_view gguf_name);

// The class of a GGUF tensor by its role; a name no table has counts as kNorm
// (a small tensor kept with the norms, as the planner counts it).
TensorClass tensor_class_of(const ArchSpec* arch, std::string_view gguf_name);

}  // namespace sluice
