// Vocabularies for the tokenizer and request harnesses: the real ones from
// ../shared/models when present, else small built-in ones with the same
// structure (SPM pieces with byte fallback; GPT-2 byte-level alphabet + merges).
// The "bert", "t5" and "rwkv" ones are always small built-in vocabularies.
#pragma once

#include <string>

#include "format/metadata.h"

namespace sluice::fuzz {

// tokenizer.ggml.* of an SPM ("llama") vocabulary.
Metadata spm_vocab_metadata();
// tokenizer.ggml.* of a byte-level BPE ("gpt2") vocabulary with tokenizer.ggml.pre
// set to `pre`.
Metadata bpe_vocab_metadata(const std::string& pre);
// tokenizer.ggml.* of a WordPiece ("bert") vocabulary.
Metadata wpm_vocab_metadata();
// tokenizer.ggml.* of a unigram ("t5") vocabulary with a precompiled charsmap.
Metadata ugm_vocab_metadata();
// tokenizer.ggml.* of an RWKV World ("rwkv") vocabulary holding every byte.
Metadata rwkv_vocab_metadata();

}  // namespace sluice::fuzz
