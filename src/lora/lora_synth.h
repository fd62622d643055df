// synth_lora(): a random LoRA adapter for a base model, at its shapes.
//
// For benchmarks (`sluice synth --lora-out`: the cost of the low-rank terms
// at a real model's shape) and tests (adapters for synthetic bases of every
// architecture, fused matrices included). Values are deterministic for a
// seed: A ~ N(0, 1 / n_in), B ~ N(0, b_std^2), so B A x is of the order of
// b_std * |x| * sqrt(rank) and visibly changes the logits. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch_spec.h"
#include "format/model_file.h"
#include "lora/lora_adapter.h"

namespace sluice {

struct SynthLoraOptions {
  std::string name = "synth-lora";
  int64_t rank = 16;
  float alpha = 32.0f;
  float b_std = 0.02f;
  uint64_t seed = 1;
  // The base tensors' roles to adapt where the base has them (per layer,
  // 2-D): by default attention q/k/v/output, the dense FFN's gate/up/down and
  // the fused forms (attn_qkv, ffn_up as gate/up).
  std::vector<TensorRole> roles = {TensorRole::kAttnQ,      TensorRole::kAttnK,   TensorRole::kAttnV,
                                   TensorRole::kAttnOutput, TensorRole::kFfnGate, TensorRole::kFfnUp,
                                   TensorRole::kFfnDown,    TensorRole::kAttnQkv, TensorRole::kFfnGateUp};
};

// Errors: a base of an architecture sluice does not run, no tensor to adapt,
// a rank below 1.
StatusOr<LoraAdapter> synth_lora(const ModelFile& base, const SynthLoraOptions& options);

}  // namespace sluice
