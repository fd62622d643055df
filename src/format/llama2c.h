// llama2.c checkpoint import: model .bin + tokenizer .bin -> ModelFile.
//
// Two checkpoint layouts, all values little-endian, weights f32 row-major [out, in]:
//
//   legacy (v0): | 7 x i32 header | weights ... | [freq_cis] | [wcls] |
//     header = dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//     vocab_size < 0 means a separate classifier wcls [vocab, dim] at the end
//     weights: tok_emb [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
//              wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim],
//              rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
//              w3 [L, hidden, dim], rms_final [dim]
//     freq_cis: 2 x [seq_len, head_dim / 2] unused floats (optional)
//
//   version 1: | u32 "ak42" | i32 1 | 7 x i32 header | u8 shared | 0-pad to 256 |
//     rms_att, rms_ffn, rms_final, tok_emb, wq, wk, wv, wo, w1, w2, w3, [wcls]
//
// The file size must match the header exactly. Tensors are borrowed from the
// memory map (each layer is a slice of the stacked arrays) and named as in GGUF
// llama files; the llama2.c matrices already use GGUF's adjacent-pair RoPE layout.
//
//   tokenizer: | i32 max_token_length | n_vocab x { f32 score | i32 len | len bytes } |
//
// Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "format/metadata.h"
#include "format/model_file.h"

namespace sluice {

// Imports a llama2.c checkpoint and its tokenizer. Metadata: general.architecture
// "llama", llama.* hyper-parameters, tokenizer.ggml.* (see import_llama2c_tokenizer).
StatusOr<ModelFile> import_llama2c(const std::string& checkpoint_path,
                                   const std::string& tokenizer_bin_path);

// The same from bytes in memory: the tensors point into `data`, which the
// caller keeps alive as long as the ModelFile. `name` and `tokenizer_name`
// label messages.
StatusOr<ModelFile> parse_llama2c(const uint8_t* data, uint64_t size, const std::string& name,
                                  const uint8_t* tokenizer, size_t tokenizer_size, const std::string& tokenizer_name);

// Parses a llama2.c tokenizer of exactly `n_vocab` tokens into tokenizer.ggml.{model,
// tokens, scores, token_type, bos/eos/unknown_token_id, add_bos/add_eos_token}:
// ' ' becomes U+2581, "\n<s>\n" / "\n</s>\n" become "<s>" / "</s>".
Status import_llama2c_tokenizer(const uint8_t* data, size_t size, const std::string& name,
                                int64_t n_vocab, Metadata* md);

}  // namespace sluice
