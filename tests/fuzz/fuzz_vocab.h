// Vocabularies for the tokenizer and request harnesses: the real ones from
// ../shared/models when present, else small built-in ones with the same
// structure (SPM pieces with byte fallback; GPT-2 byte-level alphabet + merges).
#pragma once

#include <string>

#include "format/metadata.h"

namespace sluice::fuzz {

// tokenizer.ggml.* of an SPM ("llama") vocabulary.
Metadata spm_vocab_metadata();
// tokenizer.ggml.* of a byte-level BPE ("gpt2") vocabulary with tokenizer.ggml.pre
// set to `pre`.
Metadata bpe_vocab_metadata(const std::string& pre);

}  // namespace sluice::fuzz
