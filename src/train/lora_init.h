// A new adapter for a model: which matrices (--targets), rank and alpha, and
// the usual initialisation, so that training starts from the base model:
//   A ~ U(-1/sqrt(n_in), 1/sqrt(n_in))  (PEFT's default)      B = 0
// drawn from a fixed generator seeded by `seed`, layer by layer, targets in
// the order q, k, v, o, gate, up, down, A row by row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lora/lora_adapter.h"
#include "model/model.h"

namespace sluice {

struct LoraInitOptions {
  std::vector<TensorRole> targets;  // from parse_lora_targets
  int64_t rank = 8;
  float alpha = 16.0f;
  uint64_t seed = 0;
  std::string name;                 // general.name of the adapter
  // Targets no layer has are left out instead of refused ("all" on a routed
  // model, whose FFN is its experts'), as long as one remains.
  bool only_present = false;
};

// "q,k,v,o,gate,up,down" (also the GGUF stems: attn_q, ffn_down, ...; "all"
// for every one) -> roles. Errors: an unknown or repeated name.
StatusOr<std::vector<TensorRole>> parse_lora_targets(const std::string& list);

// Errors: a rank below 1 or above a target's smaller side, a target no layer
// of the model has (named; with only_present, none that any has), an alpha
// that is not positive.
StatusOr<LoraAdapter> init_lora(const Model& model, const LoraInitOptions& options);

}  // namespace sluice
