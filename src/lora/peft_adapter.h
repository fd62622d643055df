// PEFT LoRA folders (Hugging Face's peft library) read into a LoraAdapter.
//
//   adapter_config.json        peft_type "LORA", r, lora_alpha, target_modules,
//                              use_rslora, fan_in_fan_out, bias, modules_to_save, ...
//   adapter_model.safetensors  base_model.model.model.layers.N.<module>.lora_A.weight  [r, n_in]
//                              base_model.model.model.layers.N.<module>.lora_B.weight  [n_out, r]
//
// <module> is an HF module ("self_attn.q_proj", "mlp.down_proj"): it is mapped
// through the base's ArchSpec (TensorSpec::hf) to the GGUF tensor it adapts,
// so the adapter comes out named as a GGUF adapter would be. Where the HF
// importer undoes the rotate-half row permutation of q and k
// (ArchSpec::hf_permute_qk), B's rows of q_proj and k_proj get the same
// permutation, so the adapter matches the GGUF-ordered base.
//
// The scale is lora_alpha / rank, or lora_alpha / sqrt(rank) with use_rslora;
// a module's rank is its tensors' (rank_pattern changes it per module).
// fan_in_fan_out is read and changes nothing: it is about the base layer's
// storage (GPT-2's Conv1D), the factors are [r, in] and [out, r] either way,
// and peft resets it for the Linear layers every supported architecture has.
// Refused, naming the option: peft_type other than LORA, bias other than
// "none", modules_to_save, use_dora, alpha_pattern, lora_bias, layer_replication,
// target modules the architecture does not have, tensors of another kind
// (embedding adapters, DoRA magnitudes), routed experts.
//
// Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/model_file.h"
#include "lora/lora_adapter.h"
#include "sluice/status.h"

namespace sluice {

// Reads the PEFT folder `dir` as an adapter for `base` (its architecture and
// head counts). The name is the folder's. Errors: a missing or malformed
// config or safetensors file, the refusals above, a tensor name that is not
// a layer module's lora_A / lora_B, factors whose ranks disagree.
StatusOr<LoraAdapter> read_peft_lora(const std::string& dir, const ModelFile& base);

// Permutes rows [n_rows] of B from HF's rotate-half order into GGUF's adjacent
// pairs, per head of n_rows / n_heads rows (the importer's unpermute).
//   b: [n_rows, rank] in place
Status unpermute_lora_rows(std::vector<float>& b, int64_t n_rows, int64_t rank, int64_t n_heads);

}  // namespace sluice
