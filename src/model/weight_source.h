// LayerWeightSource: where the forward pass gets weight bytes when they are not
// simply resident in the ModelFile's mapping (e.g. streamed through a ring of
// layer slots by the weight store).
//
// The model asks for layer l before computing it and releases it after; the
// source may block in acquire() until the bytes have landed, and uses the
// known layer order to prefetch ahead. Tensors outside the blocks (embeddings,
// output, norms) are resident for the whole run. Called from the model's
// forward pass only (one thread at a time).
#pragma once

#include <cstdint>
#include <string>

#include "sluice/status.h"

namespace sluice {

// Pointers to one layer's weight matrices (GGUF rows), valid until release().
struct LayerWeightPointers {
  const uint8_t* attn_q = nullptr;
  const uint8_t* attn_k = nullptr;
  const uint8_t* attn_v = nullptr;
  const uint8_t* attn_output = nullptr;
  const uint8_t* ffn_gate = nullptr;
  const uint8_t* ffn_up = nullptr;
  const uint8_t* ffn_down = nullptr;
};

class LayerWeightSource {
 public:
  virtual ~LayerWeightSource() = default;
  // Bytes of a tensor that stays resident (full GGUF name), or nullptr.
  virtual const uint8_t* resident(const std::string& name) const = 0;
  // Layer l's matrices; blocks only if their transfer has not landed.
  virtual Status acquire(int64_t layer, LayerWeightPointers* out) = 0;
  virtual void release(int64_t layer) = 0;
  // One forward step of n_tokens tokens is done (for per-token counters).
  virtual void end_step(int64_t n_tokens) = 0;
};

}  // namespace sluice
