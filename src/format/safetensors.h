// HF folder reader: config.json + *.safetensors (+ tokenizer.json) -> ModelFile.
//
// Maps HF names and shapes onto GGUF conventions (model.layers.N.self_attn.q_proj
// -> blk.N.attn_q, ...), translates config.json into "llama.*"/"qwen2.*" keys,
// undoes the q/k row permutation HF applies for rotate_half RoPE (so the tensors
// use the same adjacent-pair layout as GGUF llama files), and imports the tokenizer
// into "tokenizer.ggml.*" keys. Supports F32, F16 and BF16 tensors; sharded
// checkpoints (model.safetensors.index.json) included.
#pragma once

#include <string>

#include "format/model_file.h"

namespace sluice {

StatusOr<ModelFile> read_hf_model(const std::string& dir);

}  // namespace sluice
