// HF tokenizer import: tokenizer.json (+ tokenizer_config.json) -> "tokenizer.ggml.*"
// metadata keys, so an HF folder's tokenizer is loaded by the same code as a GGUF's.
#pragma once

#include <string>
#include <string_view>

#include "format/metadata.h"
#include "sluice/status.h"

namespace sluice {

// Keys beyond GGUF's that the importer writes for byte-level BPE:
// kIgnoreMergesKey (bool): tokenizer.json's model "ignore_merges", when stated;
//   otherwise the tokenizer.ggml.pre name decides.
inline constexpr const char* kIgnoreMergesKey = "sluice.tokenizer.ignore_merges";
// kPreSplitKey (string array): the pre_tokenizer as split steps, one per string,
//   "isolated:<regex>" (matches and the text between them become words) or
//   "removed:<regex>" (matches are dropped); written, and tokenizer.ggml.pre
//   erased, when the pre_tokenizer is not one of the named ones (gpt-2,
//   llama-bpe, qwen2). The tokenizer prefers it to tokenizer.ggml.pre.
inline constexpr const char* kPreSplitKey = "sluice.tokenizer.pre_split";

// Reads `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json, and sets
// tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, bos_token_id,
// eos_token_id, unknown_token_id, padding_token_id, add_bos_token, add_eos_token}
// and tokenizer.chat_template in `md`. Errors name the file and the problem.
Status import_hf_tokenizer(const std::string& dir, Metadata* md);
// The same from tokenizer.json's text (dir names it in messages and is where
// tokenizer_config.json would be looked for).
Status import_hf_tokenizer_json(std::string_view text, const std::string& dir, Metadata* md);

}  // namespace sluice
