// LoraAdapter: low-rank deltas for some of a base model's matrices, as a file
// holds them (llama.cpp's adapter GGUF; PEFT folders arrive in the same form).
//
// For every adapted matrix W [n_out, n_in] of the base:
//
//   y = W x + scale * B (A x)      A: [rank, n_in]   B: [n_out, rank]   (row-major)
//   scale = user_scale * alpha / rank, or user_scale when alpha is 0 (llama.cpp's rule);
//           alpha / sqrt(rank) for rank-stabilized LoRA (PEFT's use_rslora)
//
// In the GGUF the pair is stored as "<base tensor name>.lora_a" with ne =
// [n_in, rank] (the row-major A) and ".lora_b" with ne = [rank, n_out] (the
// row-major B), under general.type = "adapter", adapter.type = "lora" and
// adapter.lora.alpha. A and B are held in f32 here whatever the file's type,
// because training updates them and inference reads them as f32.
//
// The adapter names its matrices by the base's GGUF tensor names and resolves
// them to (layer, role) through the architecture's spec, so the forward pass
// finds a matrix's delta by role. A PEFT folder (lora/peft_adapter.h) arrives
// in the same terms: HF module names mapped through the base's spec, B's q/k
// rows in GGUF order. Plain data: copyable, no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/arch_spec.h"
#include "format/model_file.h"
#include "sluice/status.h"

namespace sluice {

// One adapted matrix.
struct LoraMatrix {
  std::string base_name;  // the base tensor: "blk.0.attn_q.weight"
  int64_t layer = -1;     // from base_name
  TensorRole role = TensorRole::kCount;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t rank = 0;
  std::vector<float> a;  // [rank, n_in]
  std::vector<float> b;  // [n_out, rank]
};

struct LoraAdapter {
  std::string name;   // general.name, or the file's stem
  std::string arch;   // general.architecture of the base it was made for
  float alpha = 0.0f; // adapter.lora.alpha (0: no alpha / rank factor)
  bool rslora = false; // rank-stabilized: alpha / sqrt(rank) (PEFT's use_rslora; GGUF has no such key)
  std::vector<LoraMatrix> mats;  // in file order

  // alpha / rank (alpha / sqrt(rank) with rslora; 1 when alpha is 0): the
  // factor B (A x) gets at user scale 1.
  float scale(const LoraMatrix& m) const;
  // The matrix for (layer, role), or nullptr.
  const LoraMatrix* find(int64_t layer, TensorRole role) const;
  LoraMatrix* find(int64_t layer, TensorRole role);
  // Sum of every A and B element (trainable parameters).
  int64_t n_params() const;
};

// Reads an adapter from a llama.cpp adapter GGUF, or from a PEFT folder
// (adapter_config.json + adapter_model.safetensors; read_peft_lora), which
// names HF modules and so needs the base it is for (`base`; ignored for a GGUF).
// Errors: not an adapter (general.type / adapter.type), an unpaired or
// malformed lora_a/lora_b, a rank of 0, a tensor the architecture has no role
// for, a type that does not convert to f32, a rank mismatch between A and B;
// for a folder, those of read_peft_lora.
StatusOr<LoraAdapter> read_lora(const std::string& path, const ModelFile* base = nullptr);

// The adapter from a GGUF already parsed (read_lora's GGUF half).
StatusOr<LoraAdapter> lora_from_gguf(const ModelFile& file);

// Checks the adapter against the base it is to be applied to: the same
// architecture, every adapted tensor present in the base with shape
// [n_out, n_in] equal to B's rows and A's columns, and a matrix (not a
// vector, an expert stack or a tensor outside the blocks). Errors name the
// tensor, what the adapter says and what the base has.
Status check_lora(const LoraAdapter& adapter, const ModelFile& base);

// Writes the adapter as a llama.cpp adapter GGUF (F32 tensors, A then B per
// matrix, in `mats` order). An rsLoRA adapter is written with the alpha that
// gives its scale under the GGUF rule (alpha * sqrt(rank)), which needs one
// rank for all its matrices. The file appears complete or not at all (written
// beside `path`, renamed at the end).
Status write_lora_gguf(const LoraAdapter& adapter, const std::string& path);

}  // namespace sluice
